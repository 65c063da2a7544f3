package sim

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sgtune/sgtune/engine"
)

func TestParseArgs(t *testing.T) {
	base := "--model-path m "
	cases := []struct {
		name string
		argv string
		want map[string]any // subset of Values
		err  string         // substring of the argparse error
	}{
		{"long flags", base + "--tp-size 4 --ep-size 4", map[string]any{"tp_size": 4, "ep_size": 4}, ""},
		{"equals form", base + "--tp-size=2 --mem-fraction-static=0.78", map[string]any{"tp_size": 2, "mem_fraction_static": 0.78}, ""},
		{"abbreviation tp", base + "--tp 4", map[string]any{"tp_size": 4}, ""},
		{"abbreviation dp", base + "--dp 2", map[string]any{"dp_size": 2}, ""},
		{"explicit alias ep", base + "--ep 4", map[string]any{"ep_size": 4}, ""},
		{"alias model", "--model m2", map[string]any{"model_path": "m2"}, ""},
		{"alias tensor-parallel-size", base + "--tensor-parallel-size 8", map[string]any{"tp_size": 8}, ""},
		{"unique prefix", base + "--disable-radix", map[string]any{"disable_radix_cache": true}, ""},
		{"store_true", base + "--disable-cuda-graph --enable-metrics", map[string]any{"disable_cuda_graph": true, "enable_metrics": true}, ""},
		{"human readable int", base + "--max-prefill-tokens 16k --context-length 1Ki", map[string]any{"max_prefill_tokens": 16000, "context_length": 1024}, ""},
		{"spec upper-cased", base + "--speculative-algorithm eagle", map[string]any{"speculative_algorithm": "EAGLE"}, ""},
		{"nargs plus", base + "--cuda-graph-bs 1 2 4 --tp 4", map[string]any{"cuda_graph_bs_decode": []int{1, 2, 4}, "tp_size": 4}, ""},
		{"deprecated alias", base + "--cuda-graph-max-bs 64", map[string]any{"cuda_graph_max_bs_decode": 64}, ""},
		{"old strategy name", base + "--mamba-scheduler-strategy no_buffer", map[string]any{"mamba_radix_cache_strategy": "no_buffer"}, ""},
		{"sim flags", base + "--sim-profile x --sim-speedup 25", map[string]any{"sim_profile": "x", "sim_speedup": 25.0}, ""},
		{"negative number value", base + "--chunked-prefill-size -1", map[string]any{"chunked_prefill_size": -1}, ""},
		{"unknown flag", base + "--enable-radix-cache", nil, "unrecognized arguments: --enable-radix-cache"},
		{"positional", base + "extra", nil, "unrecognized arguments: extra"},
		{"ambiguous prefix", base + "--speculative-num 3", nil, "ambiguous option: --speculative-num could match --speculative-num-draft-tokens, --speculative-num-steps"},
		{"missing value", base + "--tp-size", nil, "argument --tp-size/--tensor-parallel-size: expected one argument"},
		{"value is an option", base + "--tp-size --ep 4", nil, "expected one argument"},
		{"bad int", base + "--tp-size four", nil, "argument --tp-size/--tensor-parallel-size: invalid int value: 'four'"},
		{"bad float", base + "--mem-fraction-static high", nil, "invalid float value: 'high'"},
		{"bad choice", base + "--kv-cache-dtype fp7", nil, "invalid choice: 'fp7' (choose from 'auto', 'fp8_e5m2'"},
		{"bool with value", base + "--disable-radix-cache=1", nil, "ignored explicit argument '1'"},
		{"missing model", "--tp 4", nil, "the following arguments are required: --model-path/--model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := ParseArgs(strings.Fields(c.argv))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if !reflect.DeepEqual(a.Values[k], v) {
					t.Errorf("%s = %#v, want %#v", k, a.Values[k], v)
				}
			}
		})
	}
}

// TestMainUsageError: argparse errors print usage and exit 2.
func TestMainUsageError(t *testing.T) {
	var out, errb strings.Builder
	code := Main(t.Context(), []string{"--model-path", "m", "--bogus"}, &out, &errb, Options{})
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.HasPrefix(errb.String(), "usage: sglang serve") || !strings.Contains(errb.String(), "sglang serve: error: unrecognized arguments: --bogus") {
		t.Fatalf("stderr %q", errb.String())
	}
	for _, argv := range [][]string{{"--model-path", "m", "--sim-speedup", "0"}, {"--model-path", "m", "--sim-profile", "nope"}} {
		if code := Main(t.Context(), argv, &out, &errb, Options{}); code != 2 {
			t.Errorf("%v: exit %d, want 2", argv, code)
		}
	}
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"--model-path m --tp 4", "--tp=4 --ep", "--cuda-graph-bs 1 2 --x", "--max-prefill-tokens 1Ki", "--model=--tp"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseArgs(strings.Fields(s))
		if err == nil && a.String("model_path", "") == "" && a.Values["model_path"] == nil {
			t.Fatalf("parsed without model path: %q", s)
		}
	})
}

// TestSchemaChoicesAccepted: every value the bundled SGLang flag schema
// holds to a closed list (what sgtune check accepts) parses here too, so a
// study check passes does not fail at the simulator's argparse.
func TestSchemaChoicesAccepted(t *testing.T) {
	s, _, err := engine.SGLang.Schema("")
	if err != nil {
		t.Fatal(err)
	}
	opts := optionStrings()
	checked := 0
	for _, f := range s.Flags {
		def := opts[f.Name]
		if len(f.Choices) == 0 || def == nil || len(def.choices) == 0 {
			continue
		}
		for _, c := range f.Choices {
			checked++
			if _, err := ParseArgs([]string{"--model-path", "m", f.Name, c}); err != nil {
				t.Errorf("%s %s: the schema accepts it, the simulator does not: %v", f.Name, c, err)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no closed-list flag checked")
	}
	// --schedule-policy is a closed list in SGLang's argparse: a value
	// outside it fails there as here.
	if _, err := ParseArgs([]string{"--model-path", "m", "--schedule-policy", "fifo"}); err == nil || !strings.Contains(err.Error(), "invalid choice: 'fifo'") {
		t.Errorf("--schedule-policy fifo: %v", err)
	}
}

// TestSchemaFlagsKnown: every flag name and alias the bundled SGLang
// schema accepts is an option of the simulator's parser too, so a study
// that sgtune check passes is not refused by the simulator as an
// unrecognized argument.
func TestSchemaFlagsKnown(t *testing.T) {
	s, _, err := engine.SGLang.Schema("")
	if err != nil {
		t.Fatal(err)
	}
	opts := optionStrings()
	for _, f := range s.Flags {
		for _, n := range append([]string{f.Name}, f.Aliases...) {
			if _, ok := opts[n]; !ok {
				t.Errorf("%s: the schema knows it, the simulator does not", n)
			}
		}
	}
}

// TestProfileHint: a launch whose weights do not fit the profile's GPUs (a
// study of a smaller model on fewer GPUs, run on the default profile) says
// which model the profile simulates and how to simulate another; --help
// describes --sim-profile.
func TestProfileHint(t *testing.T) {
	for _, argv := range [][]string{
		{"--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "2"},
		{"--sim-engine", "vllm", "meta-llama/Llama-3.1-8B-Instruct", "-tp", "2"},
	} {
		var out, errb strings.Builder
		code := Main(t.Context(), argv, &out, &errb, Options{NoStartupDelay: true})
		if code != ExitCrash {
			t.Errorf("%v: exit %d, want %d", argv, code, ExitCrash)
		}
		if want := "[sim] profile glm-5.3-flash-h200x4 simulates GLM-5.3-Flash FP8 on 4x H200 (seed 000): 290 GB of weights, 145.0 GB per GPU with 2 GPUs"; !strings.Contains(out.String(), want) ||
			!strings.Contains(out.String(), "pass --sim-profile FILE (docs/simulator.md)") {
			t.Errorf("%v: no profile hint in\n%s", argv, out.String())
		}
		// The hint is no failure signature of its own.
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "[sim] profile") && (strings.Contains(l, "out of memory") || strings.Contains(l, "Not enough")) {
				t.Errorf("hint reads as an engine error: %s", l)
			}
		}
	}
	// The profile's own launch at a memory fraction too low for its
	// weights fails too, but the fix is a higher fraction, not a profile.
	var low, lowErr strings.Builder
	if code := Main(t.Context(), []string{"--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4", "--mem-fraction-static", "0.54"}, &low, &lowErr, Options{NoStartupDelay: true}); code != ExitCrash {
		t.Errorf("mem fraction 0.54: exit %d, want %d", code, ExitCrash)
	}
	if strings.Contains(low.String(), "[sim] profile") {
		t.Errorf("mem fraction 0.54 of the profile's own launch gets the profile hint:\n%s", low.String())
	}
	var out, errb strings.Builder
	if code := Main(t.Context(), []string{"--help"}, &out, &errb, Options{}); code != ExitOK {
		t.Fatalf("--help: exit %d", code)
	}
	if !strings.Contains(out.String(), "--sim-profile NAME|FILE") || !strings.Contains(out.String(), "docs/simulator.md") {
		t.Errorf("--help does not describe --sim-profile:\n%s", out.String())
	}
}

// TestDocProfileExample: the example profile in docs/simulator.md parses
// and starts the launch it is written for (TP 2, no KV cache error).
func TestDocProfileExample(t *testing.T) {
	p, err := ParseProfile([]byte(docExampleProfile(t)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseArgs([]string{"--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if pl := Resolve(a, p); pl.Err != nil || pl.KVTokens < 500000 {
		t.Errorf("the example does not start at TP 2: %+v, %d KV tokens", pl.Err, pl.KVTokens)
	}
}

// docExampleProfile is the example profile in docs/simulator.md: a dense
// (hybrid: false) Llama-3.1-8B on 2x H100.
func docExampleProfile(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/simulator.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		if body, _, _ := strings.Cut(block, "```"); strings.HasPrefix(body, "name: ") {
			return body
		}
	}
	t.Fatal("no example profile (a yaml block starting with name:) in docs/simulator.md")
	return ""
}

// TestStatePoolLinesOnlyForHybrid: SGLang logs the Mamba pool and the
// batches' mamba/full-token fields only for a hybrid model; a dense
// model's Prefill and Decode batch lines carry the plain token usage. The
// hybrid profile keeps its lines.
func TestStatePoolLinesOnlyForHybrid(t *testing.T) {
	dense := filepath.Join(t.TempDir(), "dense.yaml")
	if err := os.WriteFile(dense, []byte(docExampleProfile(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		argv   []string
		hybrid bool
	}{
		{"dense", []string{"--sim-profile", dense, "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "2"}, false},
		{"hybrid", []string{"--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := serveOne(t, append(tc.argv, "--port", "0", "--sim-speedup", "50"))
			var state, prefill, decode []string
			for _, l := range strings.Split(log, "\n") {
				switch {
				case strings.Contains(l, "server_args=ServerArgs("):
					// Every ServerArgs field is printed, mamba flags too.
				case strings.Contains(strings.ToLower(l), "mamba"), strings.Contains(l, "full token"):
					state = append(state, l)
				}
				if strings.Contains(l, "Prefill batch") {
					prefill = append(prefill, l)
				}
				if strings.Contains(l, "Decode batch") {
					decode = append(decode, l)
				}
			}
			if len(prefill) == 0 || len(decode) == 0 {
				t.Fatalf("no Prefill or Decode batch line:\n%s", log)
			}
			if !tc.hybrid {
				if len(state) > 0 {
					t.Errorf("a dense model logs state-pool lines:\n%s", strings.Join(state, "\n"))
				}
				if !strings.Contains(prefill[0], ", token usage: ") || !strings.Contains(decode[0], ", #token: ") || !strings.Contains(decode[0], ", token usage: ") {
					t.Errorf("a dense model's batch lines lack the plain token usage:\n%s\n%s", prefill[0], decode[0])
				}
				return
			}
			for _, want := range []string{"Mamba Cache is allocated. max_mamba_cache_size: ", "full token usage: "} {
				if !strings.Contains(log, want) {
					t.Errorf("hybrid log lacks %q:\n%s", want, log)
				}
			}
			if !strings.Contains(prefill[0], ", full token usage: ") || !strings.Contains(prefill[0], ", mamba usage: ") ||
				!strings.Contains(decode[0], ", #full token: ") || !strings.Contains(decode[0], ", mamba num: ") {
				t.Errorf("hybrid batch lines changed:\n%s\n%s", prefill[0], decode[0])
			}
		})
	}
}

// serveOne starts the simulator with argv, sends one 60-token request (with
// the warm-up, over the 40 decode steps between Decode batch lines), stops
// it and returns its log.
func serveOne(t *testing.T, argv []string) string {
	t.Helper()
	addr, out, stop := startMain(t, argv)
	body := `{"messages": [{"role": "user", "content": "hello"}], "max_tokens": 60, "ignore_eos": true}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if code := stop(); code != ExitOK {
		t.Errorf("exit %d", code)
	}
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("chat: %v %v\n%s", resp, err, out.String())
	}
	return out.String()
}

// startMain runs the simulator's Main in-process with argv until it is
// ready and returns its address, its log and stop, which cancels it and
// returns its exit code. A sim that exits or is not ready in 20 s fails
// the test.
func startMain(t *testing.T, argv []string) (addr string, out *syncBuffer, stop func() int) {
	t.Helper()
	out = &syncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, argv, out, io.Discard, Options{NoStartupDelay: true, Ready: func(addr string) { ready <- addr }})
	}()
	stop = func() int {
		cancel()
		return <-done
	}
	select {
	case addr = <-ready:
	case code := <-done:
		cancel()
		t.Fatalf("exited %d:\n%s", code, out.String())
	case <-time.After(20 * time.Second):
		stop()
		t.Fatalf("not ready:\n%s", out.String())
	}
	return addr, out, stop
}
