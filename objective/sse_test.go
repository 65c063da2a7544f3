package objective

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr error
	}{
		{"basic", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`}, io.EOF},
		{"crlf and no space", "data:{\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n", []string{`{"a":1}`}, io.EOF},
		{"comments and events", ": ping\nevent: message\nid: 3\ndata: x\n\ndata: [DONE]\n", []string{"x"}, io.EOF},
		{"longer than the buffer", "data: " + long + "\n\ndata: [DONE]\n\n", []string{long}, io.EOF},
		{"truncated", "data: x\n\ndata: y", []string{"x", "y"}, errTruncated},
		{"no done", "data: x\n\n", []string{"x"}, errTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSSEReader(strings.NewReader(tt.in))
			var got []string
			var err error
			for {
				var p []byte
				p, err = r.Next()
				if err != nil {
					break
				}
				got = append(got, string(p))
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("end error = %v, want %v", err, tt.wantErr)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("payloads = %.80q, want %.80q", got, tt.want)
			}
		})
	}
}

func TestParseChunk(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		content string // unescaped; "<nil>" for null/absent
		reason  string
		tools   bool
		finish  string
		usage   int // -1 none
		errPart bool
		bad     bool
	}{
		{"sglang first chunk", `{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}`,
			"", "<nil>", false, "", -1, false, false},
		{"content", `{"choices":[{"index":0,"delta":{"role":null,"content":" hello \"you\"\n","reasoning_content":null}}],"usage":null}`,
			" hello \"you\"\n", "<nil>", false, "", -1, false, false},
		{"reasoning", `{"choices":[{"delta":{"reasoning_content":"think","content":null}}]}`, "<nil>", "think", false, "", -1, false, false},
		{"tool call", `{"choices":[{"delta":{"role":null,"content":null,"tool_calls":[{"id":"call_1","index":0,"type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]}}]}`,
			"<nil>", "<nil>", true, "", -1, false, false},
		{"finish", `{"choices":[{"index":0,"delta":{},"finish_reason":"length","matched_stop":null}]}`, "<nil>", "<nil>", false, "length", -1, false, false},
		{"usage", `{"id":"a","choices":[],"usage":{"prompt_tokens":12,"total_tokens":268,"completion_tokens":256,"prompt_tokens_details":null,"reasoning_tokens":0}}`,
			"<nil>", "<nil>", false, "", 256, false, false},
		{"second choice ignored", `{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}`, "a", "<nil>", false, "", -1, false, false},
		{"error", `{"error":{"message":"boom","code":500}}`, "<nil>", "<nil>", false, "", -1, true, false},
		{"whitespace", " { \"choices\" : [ { \"delta\" : { \"content\" : \"x\" } } ] } ", "x", "<nil>", false, "", -1, false, false},
		{"unicode escape", `{"choices":[{"delta":{"content":"\u00e9\\"}}]}`, "é\\", "<nil>", false, "", -1, false, false},
		{"truncated", `{"choices":[{"delta":{"content":"x`, "", "", false, "", -1, false, true},
		{"not an object", `[1]`, "", "", false, "", -1, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c chunk
			err := parseChunk([]byte(tt.in), &c)
			if (err != nil) != tt.bad {
				t.Fatalf("err = %v, want error %v", err, tt.bad)
			}
			if tt.bad {
				return
			}
			str := func(b []byte) string {
				if b == nil {
					return "<nil>"
				}
				return unescape(b)
			}
			if got := str(c.Content); got != tt.content {
				t.Errorf("content = %q, want %q", got, tt.content)
			}
			if got := str(c.Reasoning); got != tt.reason {
				t.Errorf("reasoning = %q, want %q", got, tt.reason)
			}
			if (c.ToolCalls != nil) != tt.tools {
				t.Errorf("tool_calls = %q, want present %v", c.ToolCalls, tt.tools)
			}
			if string(c.Finish) != tt.finish {
				t.Errorf("finish = %q, want %q", c.Finish, tt.finish)
			}
			usage := -1
			if c.HasUsage {
				usage = c.CompletionTokens
			}
			if usage != tt.usage {
				t.Errorf("usage = %d, want %d", usage, tt.usage)
			}
			if (c.Error != nil) != tt.errPart {
				t.Errorf("error = %q, want present %v", c.Error, tt.errPart)
			}
		})
	}
}

func TestParseChunkAllocs(t *testing.T) {
	in := []byte(`{"id":"0123456789abcdef0123456789abcdef","object":"chat.completion.chunk","created":1700000000,"model":"zai-org/GLM-5.3-Flash","choices":[{"index":0,"delta":{"role":null,"content":" tok","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`)
	var c chunk
	if n := testing.AllocsPerRun(100, func() { _ = parseChunk(in, &c) }); n != 0 {
		t.Errorf("parseChunk allocates %v times per chunk, want 0", n)
	}
}

// FuzzParseChunk checks that the parser never panics and agrees with
// encoding/json on choices[0].delta.content and usage for valid input.
func FuzzParseChunk(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null}}]}`,
		`{"choices":[{"delta":{"content":"a\"b\\"}}],"usage":null}`,
		`{"choices":[],"usage":{"completion_tokens":7,"prompt_tokens":3}}`,
		`{"error":{"message":"x"}}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]}}]}`,
		`{"a":[1,2,{"b":null}],"choices":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var c chunk
		err := parseChunk(in, &c)
		if !json.Valid(in) || !utf8.Valid(in) || strings.Contains(string(in), `"message"`) || strings.Contains(string(in), `"reasoning"`) {
			return
		}
		var ref struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		dec := json.NewDecoder(strings.NewReader(string(in)))
		if dec.Decode(&ref) != nil || strings.ContainsAny(string(in), "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			// encoding/json matches keys case-insensitively; sgtune does not.
			return
		}
		if err != nil {
			t.Fatalf("valid JSON rejected: %v", err)
		}
		want := "<nil>"
		if len(ref.Choices) > 0 && ref.Choices[0].Delta.Content != nil {
			want = *ref.Choices[0].Delta.Content
		}
		got := "<nil>"
		if c.Content != nil {
			got = unescape(c.Content)
		}
		if got != want {
			t.Fatalf("content = %q, encoding/json says %q", got, want)
		}
		if ref.Usage != nil && ref.Usage.CompletionTokens < 1e17 && c.CompletionTokens != ref.Usage.CompletionTokens {
			t.Fatalf("completion_tokens = %d, encoding/json says %d", c.CompletionTokens, ref.Usage.CompletionTokens)
		}
	})
}

// FuzzSSEReader checks that the reader never panics, never returns a
// payload holding a line break, and ends every stream with io.EOF (after
// [DONE]) or errTruncated.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": c\r\nevent: x\r\ndata:y\r\n\r\n"))
	f.Add([]byte("data: " + strings.Repeat("z", 20000) + "\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newSSEReader(strings.NewReader(string(in)))
		for i := 0; ; i++ {
			p, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, errTruncated) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if strings.ContainsAny(string(p), "\n") {
				t.Fatalf("payload %q holds a line break", p)
			}
			if i > len(in) {
				t.Fatal("more payloads than input bytes")
			}
		}
	})
}
