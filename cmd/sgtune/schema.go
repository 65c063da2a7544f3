package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/shell"
)

func (a *app) schemaCmd() *cobra.Command {
	var engineName, fromHelp, outPath, version string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "schema --engine sglang|vllm|llamacpp [--from-help FILE | -- COMMAND...] [-o FILE]",
		Short: "Write a flag schema read from an engine's own --help output",
		Long: `schema reads an engine's --help output, from a saved file (--from-help) or
by running COMMAND (everything after --), and writes a flag schema in the
format of the bundled ones (engine/flags/*.yaml) that a study names with
engine.flags_schema. SGLang and vLLM print argparse's layout; llama.cpp's
llama-server prints its own table. Examples:

  sgtune schema --engine llamacpp -o llama.yaml -- llama-server --help
  sgtune schema --engine sglang -o sglang.yaml -- \
      docker run --rm lmsysorg/sglang:v0.5.6 python3 -m sglang.launch_server --help
  sgtune schema --engine vllm --from-help vllm-help.txt -o vllm.yaml

(vLLM prints every flag only with 'vllm serve --help=all'.) Each flag gets
its spellings, bool (no value), choices ({a,b,c}), nargs and the default
the help states; owner (flags sgtune sets itself: host, port, model path),
value types the help does not show, and the canonical name among several
spellings come from the bundled schema of the same engine. Exit code 2 when
the text cannot be read (the message names the file and line); nothing is
written then.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if engineName == "" {
				return badInput(fmt.Errorf("--engine is required: the engine the help text is of (%s)", strings.Join(engine.Names(), ", ")))
			}
			e, err := engine.Lookup(engineName)
			if err != nil {
				return badInput(fmt.Errorf("--engine: %w", err))
			}
			if (fromHelp == "") == (len(args) == 0) {
				return badInput(fmt.Errorf("give either --from-help FILE or -- COMMAND (see '%s --help')", cmd.CommandPath()))
			}
			var help []byte
			source := fromHelp
			if fromHelp != "" {
				if help, err = os.ReadFile(fromHelp); err != nil {
					return badInput(fmt.Errorf("--from-help: %w", err))
				}
			} else {
				source = "the output of " + shell.Join(args)
				if help, err = runHelp(cmd.Context(), args, timeout); err != nil {
					return err
				}
			}
			data, err := schemaFromHelp(e, version, help, source)
			if err != nil {
				return err
			}
			if outPath == "" {
				_, err = a.stdout.Write(data)
				return err
			}
			return writeFileAtomic(outPath, data)
		},
	}
	cmd.Flags().StringVar(&engineName, "engine", "", "engine the help text is of: "+strings.Join(engine.Names(), ", "))
	cmd.Flags().StringVar(&fromHelp, "from-help", "", "read the --help output saved in FILE")
	cmd.Flags().StringVarP(&outPath, "output", "o", "", "write the schema to FILE (default: standard output)")
	cmd.Flags().StringVar(&version, "engine-version", "", "the engine version the schema states (version:), e.g. v0.5.6")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long COMMAND may run (a docker image may be pulled first)")
	return cmd
}

// schemaFromHelp parses help, builds the schema and checks that it loads
// as a study's flags_schema would; source names the text in errors.
func schemaFromHelp(e *engine.Engine, version string, help []byte, source string) ([]byte, error) {
	rows, err := engine.ParseHelp(e.Name, help)
	if err != nil {
		return nil, badInput(placed(source, err))
	}
	base, _, err := e.Schema("")
	if err != nil {
		return nil, fmt.Errorf("bundled %s schema: %w", e.Name, err)
	}
	s, err := engine.SchemaFromHelp(e.Name, version, rows, base)
	if err != nil {
		return nil, badInput(placed(source, err))
	}
	if s.Version == "" {
		s.Version = "unknown"
	}
	header := fmt.Sprintf("%s flag schema written by `sgtune schema` from\n%s.\n"+
		"Value types the help does not show, owner and canonical names are from\n"+
		"the %s schema. Values an engine registers at run time\n"+
		"(plugins) are not in its --help, so not in choices here.", e.Name, source, base.Source)
	data := engine.MarshalSchema(s, header)
	if _, err := engine.ParseFlagSchema(data, source); err != nil {
		return nil, fmt.Errorf("the written schema does not load: %w", err)
	}
	return data, nil
}

// helpAt is an error in a help text, placed at its file and line.
type helpAt struct {
	source string
	err    *engine.HelpError
}

func (e helpAt) Error() string { return fmt.Sprintf("%s:%d: %s", e.source, e.err.Line, e.err.Msg) }
func (e helpAt) Unwrap() error { return e.err }

// placed names where in source err is: FILE:LINE: message, the way
// compilers do, for a *engine.HelpError; else SOURCE: message.
func placed(source string, err error) error {
	var he *engine.HelpError
	if errors.As(err, &he) {
		return helpAt{source: source, err: he}
	}
	return fmt.Errorf("%s: %w", source, err)
}

// runHelp runs a help command and returns what it printed on standard
// output (or, when that is empty, standard error: some tools print their
// help there).
func runHelp(ctx context.Context, argv []string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return nil, badInput(fmt.Errorf("%s: %w", argv[0], err))
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s ran over --timeout %v: %w", shell.Join(argv), timeout, ctx.Err())
	case errors.As(err, &ee):
		return nil, fmt.Errorf("%s: %w; it printed: %s", shell.Join(argv), err, lastChars(stderr.String(), 600))
	case err != nil:
		return nil, fmt.Errorf("%s: %w", shell.Join(argv), err)
	}
	if len(bytes.TrimSpace(stdout.Bytes())) == 0 {
		return stderr.Bytes(), nil
	}
	return stdout.Bytes(), nil
}

// lastChars returns the last n bytes of s, trimmed.
func lastChars(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory, so that a reader never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return badInput(fmt.Errorf("-o %s: no directory %s to write it in", path, dir))
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("-o %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	return nil
}
