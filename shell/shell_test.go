package shell

import (
	"errors"
	"slices"
	"testing"
)

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "''"},
		{"--tp-size", "--tp-size"},
		{"/usr/bin/python3", "/usr/bin/python3"},
		{"a=b,c:d+e@f%g", "a=b,c:d+e@f%g"},
		{"two words", "'two words'"},
		{"it's", `'it'"'"'s'`},
		{"$HOME", `"\$HOME"`},
		{"a `cmd` $x \\ \"q\"", "\"a \\`cmd\\` \\$x \\\\ \\\"q\\\"\""},
		{`a"b`, `'a"b'`},
		{`back\slash`, `'back\slash'`},
		{"tab\there", "'tab\there'"},
		{"ünï", "'ünï'"},
		{"*", "'*'"},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestJoin(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"sglang-sim", "--port", "30000"}, "sglang-sim --port 30000"},
		{[]string{"python3", "-m", "sglang.launch_server", "--json-model-override-args", `{"a": 1}`},
			`python3 -m sglang.launch_server --json-model-override-args '{"a": 1}'`},
		{[]string{"echo", "", "x y"}, "echo '' 'x y'"},
	}
	for _, tt := range tests {
		if got := Join(tt.in); got != tt.want {
			t.Errorf("Join(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr error
	}{
		{"", nil, nil},
		{"  \t\n ", nil, nil},
		{"a b  c", []string{"a", "b", "c"}, nil},
		{"python3 -m sglang.launch_server", []string{"python3", "-m", "sglang.launch_server"}, nil},
		{`'single $quoted' x`, []string{"single $quoted", "x"}, nil},
		{`"double \"q\" \$ \\ \n"`, []string{`double "q" $ \ \n`}, nil},
		{`a\ b c\"d`, []string{"a b", `c"d`}, nil},
		{`''`, []string{""}, nil},
		{`x'y'"z"`, []string{"xyz"}, nil},
		{`'it'"'"'s'`, []string{"it's"}, nil},
		{"trailing\\", []string{"trailing"}, nil},
		{"'open", nil, ErrSingleQuote},
		{`"open`, nil, ErrDoubleQuote},
		{`"open\"`, nil, ErrDoubleQuote},
	}
	for _, tt := range tests {
		got, err := Split(tt.in)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("Split(%q) error %v, want %v", tt.in, err, tt.wantErr)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Split(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzSplit checks that Split reads back every word Join wrote, and that
// Split never panics on arbitrary input.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"", "a b", "it's", `"q" \x $y`, "tab\tnew\nline", "'", `"`, "\\", "\xff\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = Split(s) // any input: an error or words, never a panic
		// Cut s in two around an empty word, so Join has to separate words.
		argv := []string{s}
		if i := len(s) / 2; i > 0 {
			argv = []string{s[:i], "", s[i:]}
		}
		got, err := Split(Join(argv))
		if err != nil {
			t.Fatalf("Split(Join(%q)): %v", argv, err)
		}
		if !slices.Equal(got, argv) {
			t.Fatalf("Split(Join(%q)) = %q", argv, got)
		}
	})
}
