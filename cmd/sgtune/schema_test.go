package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/engine"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden schemas in testdata/help/")

// savedHelp are the saved --help texts (testdata/help/README.md says how
// each was obtained), the study each schema is checked with, and the flags
// the schema must hold.
var savedHelp = []struct {
	engine, version, help, study string
	flags                        []string
}{
	{"sglang", "v0.5.6.post2", "sglang-v0.5.6.post2.txt", "demo.yaml",
		[]string{"--model-path", "--model", "--tp-size", "--tensor-parallel-size", "--kv-cache-dtype", "--moe-a2a-backend", "--host", "--port"}},
	{"vllm", "v0.11.1", "vllm-v0.11.1.txt", "vllm-sim.yaml",
		[]string{"--model", "--tensor-parallel-size", "-tp", "--data-parallel-size", "--enable-expert-parallel", "--enable-prefix-caching", "--no-enable-prefix-caching", "--gpu-memory-utilization", "--max-num-batched-tokens", "--speculative-config", "--async-scheduling", "--kv-cache-dtype", "--host", "--port"}},
	{"llamacpp", "v0.4.0", "llamacpp-v0.4.0.txt", "llama-cpu.yaml",
		[]string{"--model", "-m", "--ctx-size", "-c", "--parallel", "-np", "--threads", "-t", "--cont-batching", "--no-cont-batching", "--host", "--port", "--metrics"}},
}

func runSchema(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: os.Getenv}
	code = a.execute(context.Background(), append([]string{"schema"}, args...))
	return code, out.String(), errb.String()
}

// withSchema writes a copy of a bundled study into dir with
// engine.flags_schema set to schema (and edit applied to the text).
func withSchema(t *testing.T, dir, study, schema string, edit func(string) string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "studies", study))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "\nengine:\n", "\nengine:\n  flags_schema: "+schema+"\n", 1)
	if !strings.Contains(text, "flags_schema") {
		t.Fatalf("%s has no engine: line to add flags_schema under", study)
	}
	if edit != nil {
		text = edit(text)
	}
	path := filepath.Join(dir, study)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSchemaFromSavedHelp: each saved help text gives the golden schema
// (go test ./cmd/sgtune -run Schema -update rewrites it), which loads,
// holds the engine's main flags with the bundled schema's owners, and
// passes sgtune check for a study that names it; check says it used it.
func TestSchemaFromSavedHelp(t *testing.T) {
	for _, c := range savedHelp {
		t.Run(c.engine, func(t *testing.T) {
			// llama-cpu.yaml reads its model path from the environment.
			t.Setenv("LLAMA_MODEL", filepath.Join(t.TempDir(), "model.gguf"))
			helpPath := filepath.Join("..", "..", "testdata", "help", c.help)
			code, out, errs := runSchema(t, "--engine", c.engine, "--engine-version", c.version, "--from-help", helpPath)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errs)
			}
			golden := strings.TrimSuffix(helpPath, ".txt") + ".schema.yaml"
			if *updateGolden {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/sgtune -run Schema -update)", err)
			}
			if out != string(want) {
				t.Errorf("schema differs from %s (run go test ./cmd/sgtune -run Schema -update after checking the change)", golden)
			}

			dir := t.TempDir()
			schemaPath := filepath.Join(dir, c.engine+".yaml")
			if code, _, errs := runSchema(t, "--engine", c.engine, "--engine-version", c.version, "--from-help", helpPath, "-o", schemaPath); code != exitOK {
				t.Fatalf("-o: exit %d: %s", code, errs)
			}
			s, err := engine.LoadSchemaFile(schemaPath)
			if err != nil {
				t.Fatal(err)
			}
			if s.Engine != c.engine || s.Version != c.version {
				t.Errorf("engine %q version %q", s.Engine, s.Version)
			}
			e, _ := engine.Lookup(c.engine)
			base, _, _ := e.Schema("")
			for _, name := range c.flags {
				f, ok := s.Lookup(name)
				if !ok {
					t.Errorf("no %s", name)
					continue
				}
				if b, ok := base.Lookup(name); ok && b.Owner != f.Owner {
					t.Errorf("%s: owner %q, the bundled schema's %q", name, f.Owner, b.Owner)
				}
			}
			for _, name := range []string{e.HostFlag, e.PortFlag, e.ModelFlag} {
				if f, ok := s.Lookup(name); !ok || f.Owner == "" {
					t.Errorf("%s: %+v, want sgtune's owner", name, f)
				}
			}

			study := withSchema(t, dir, c.study, schemaPath, nil)
			code, out = runCheck(t, study)
			if code != exitOK {
				t.Fatalf("check: exit %d\n%s", code, out)
			}
			if !strings.Contains(out, "flags from "+schemaPath+"\n") {
				t.Errorf("check does not name the schema file it used:\n%s", out)
			}
		})
	}
}

// TestSchemaCommand: -- COMMAND runs it and reads what it prints, as
// --from-help reads the file.
func TestSchemaCommand(t *testing.T) {
	helpPath := filepath.Join("..", "..", "testdata", "help", savedHelp[0].help)
	_, fromFile, _ := runSchema(t, "--engine", "sglang", "--from-help", helpPath)
	code, out, errs := runSchema(t, "--engine", "sglang", "--", "cat", helpPath)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	strip := func(s string) string { return s[strings.Index(s, "\nengine:"):] }
	if strip(out) != strip(fromFile) {
		t.Error("the schema from the command's output differs from the one from the file")
	}
	if !strings.Contains(out, "from\n# the output of cat "+helpPath+".") {
		t.Errorf("the header does not name the command:\n%s", out[:300])
	}
	code, _, errs = runSchema(t, "--engine", "sglang", "--", "sh", "-c", "echo broken >&2; exit 3")
	if code != exitFailure || !strings.Contains(errs, "exit status 3; it printed: broken") {
		t.Errorf("a failing command: exit %d: %s", code, errs)
	}
}

// TestSchemaBadInput: a text that is not a help text, or a usage error,
// exits 2 naming the file and line, and writes nothing.
func TestSchemaBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "help.txt")
	if err := os.WriteFile(bad, []byte("usage: x\n\noptions:\n  --ok X   fine\n  --bad{ X  broken\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.yaml")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--engine", "sglang", "--from-help", bad, "-o", out}, bad + `:5: "--bad{" is not an option spelling`},
		{[]string{"--engine", "vllm", "--from-help", filepath.Join(dir, "none.txt"), "-o", out}, "--from-help: open " + filepath.Join(dir, "none.txt")},
		{[]string{"--engine", "sglang", "-o", out}, "give either --from-help FILE or -- COMMAND"},
		{[]string{"--engine", "sglang", "--from-help", bad, "-o", out, "--", "cat"}, "give either --from-help FILE or -- COMMAND"},
		{[]string{"--engine", "tgi", "--from-help", bad}, `unknown engine "tgi"`},
		{[]string{"--from-help", bad}, "--engine is required"},
		{[]string{"--engine", "llamacpp", "-o", out, "--", filepath.Join(dir, "no-such-binary"), "--help"}, "no-such-binary"},
	} {
		code, _, errs := runSchema(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errs, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v wrote %s", c.args, out)
		}
	}
}

// TestSchemaCheckClosedList: with the generated SGLang schema, a typo in a
// closed-list flag's value is refused by check (exit 2), naming the valid
// values the help listed.
func TestSchemaCheckClosedList(t *testing.T) {
	dir := t.TempDir()
	schemaPath := filepath.Join(dir, "sglang.yaml")
	helpPath := filepath.Join("..", "..", "testdata", "help", savedHelp[0].help)
	if code, _, errs := runSchema(t, "--engine", "sglang", "--from-help", helpPath, "-o", schemaPath); code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for flagName, c := range map[string]struct{ value, want string }{
		"--kv-cache-dtype":  {"fp9", "--kv-cache-dtype \"fp9\" is not a valid choice (did you mean bf16?); valid: auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16, fp4_e2m1"},
		"--moe-a2a-backend": {"deepepp", "--moe-a2a-backend \"deepepp\" is not a valid choice (did you mean deepep?); valid: none, deepep, mooncake, ascend_fuseep"},
	} {
		study := withSchema(t, dir, "demo.yaml", schemaPath, func(s string) string {
			return strings.Replace(s, "\nfixed:\n", "\nfixed:\n  "+flagName+": "+c.value+"\n", 1)
		})
		code, out := runCheck(t, study)
		if code != exitUsage || !strings.Contains(out, c.want) {
			t.Errorf("%s %s: exit %d, want 2 and %q:\n%s", flagName, c.value, code, c.want, out)
		}
	}
}

// llamaServer returns the llama-server binary the tests run: $LLAMA_SERVER,
// else the one `make llama-server` caches (the launcher's tests look in
// the same places); it skips the test when there is none.
func llamaServer(t *testing.T) string {
	t.Helper()
	server := os.Getenv("LLAMA_SERVER")
	if server == "" {
		cache := os.Getenv("SGTUNE_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "sgtune")
		}
		server = filepath.Join(cache, "llama-3.21.1", "llama.cpp", "build", "bin", "llama-server")
	}
	if _, err := os.Stat(server); err != nil {
		t.Skipf("no llama-server binary (%v): set LLAMA_SERVER or run `make llama-server` (about 10 minutes once; cached outside the repo)", err)
	}
	return server
}

// TestSchemaRealLlamaServer: the schema of this machine's real
// llama-server, read by running `llama-server --help`, loads and has the
// flags the llama.cpp studies search, with their short spellings, and
// passes check for llama-cpu.yaml.
func TestSchemaRealLlamaServer(t *testing.T) {
	server := llamaServer(t)
	dir := t.TempDir()
	schemaPath := filepath.Join(dir, "llama.yaml")
	code, _, errs := runSchema(t, "--engine", "llamacpp", "-o", schemaPath, "--", server, "--help")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	s, err := engine.LoadSchemaFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	for short, long := range map[string]string{"-c": "--ctx-size", "-np": "--parallel", "-t": "--threads", "-m": "--model", "-cb": "--cont-batching"} {
		f, ok := s.Lookup(short)
		if !ok || f.Name != long {
			t.Errorf("%s: %+v, want the flag %s", short, f, long)
		}
	}
	if f, _ := s.Lookup("--ctx-size"); f != nil && f.Type != "int" {
		t.Errorf("--ctx-size is a %s", f.Type)
	}
	if !s.IsNegation("--no-cont-batching") || s.Inline() {
		t.Error("--no-cont-batching is a negation, and llama.cpp reads no --flag=value")
	}
	t.Setenv("LLAMA_MODEL", filepath.Join(dir, "model.gguf"))
	code, out := runCheck(t, withSchema(t, dir, "llama-cpu.yaml", schemaPath, nil))
	if code != exitOK {
		t.Fatalf("check: exit %d\n%s", code, out)
	}
}

// TestCheckNamesBundledSchema: without flags_schema, check names the
// bundled schema it used.
func TestCheckNamesBundledSchema(t *testing.T) {
	code, out := runCheck(t, "../../testdata/studies/demo.yaml")
	if code != exitOK || !strings.Contains(out, "flags from bundled sglang-v0.5.21\n") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}
