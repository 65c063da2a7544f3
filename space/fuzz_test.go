package space

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"../testdata/studies", "../testdata/studies/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(base + "params:\n  - {name: a, type: int, low: 1, high: 3, log: true, flag: --tp-size}\n  - {name: b, type: float, low: 0.1, high: 0.9, flag: --mem-fraction-static, when: a > 1}\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte(base + "params:\n  - {name: s, type: categorical, choices: [none, EAGLE, 4]}\n  - {name: n, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: \"s == 'EAGEL' or s in [1, -(2)] or s > 3\"}\n"))
	f.Add([]byte(base + "params:\n  - {name: s, type: int, low: 1, high: 3}\nderived:\n  - {flag: --speculative-num-draft-tokens, value: \"'abc'\"}\n  - {flag: --cuda-graph-max-bs, value: s // (s - 1)}\n"))
	f.Add([]byte("---\n" + base + "---\n# empty\n---\nname: second\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := Parse("f.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.yaml:") {
					t.Fatalf("error line %q lacks file:line:col", line)
				}
			}
			return
		}
		// A valid study must suggest, resolve and check without panicking.
		g := NewRandomSuggester(1)
		for range 3 {
			p, err := st.Suggest(g)
			if err != nil {
				return
			}
			cfg, err := st.Resolve(p, nil)
			if err != nil {
				t.Fatalf("suggested params do not resolve: %v (%v)", err, p)
			}
			_ = st.Check(cfg)
		}
	})
}
