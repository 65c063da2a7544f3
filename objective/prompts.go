package objective

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// words make synthetic prompts; common short English words are about one
// token each in the tokenizers of current chat models.
var words = strings.Fields(`the of and to in is was for on that with as by at from
his her they this had are not but have one all were when we there can an which
their said if will each about how up out them then she many some so these would
other into has more two like him time see no could make than first been its who
now people my made over did down only way find use may water long little very
after words called just where most know get through back much before go good new
write our used me man too any day same right look think also around another came
come work three word must because does part even place well such here take why
things help put years different away again off went old number great tell men say
small every found still between name should home big give air line set own under
read last never us left end along while might next sound below saw something thought
both few those always looked show large often together asked house world going want
school important until form food keep children feet land side without boy once animal
life enough took sometimes four head above kind began almost live page got earth need
far hand high year mother light parts country father let night following picture being
study second eyes soon times story boys since white days ever paper hard near sentence
better best across during today others however sure means knew its try told young miles`)

// syntheticPrompt returns a prompt of about n tokens that starts with tag,
// so that prompts with different tags share no cacheable prefix.
func syntheticPrompt(rng *rand.Rand, tag string, n int) string {
	var b strings.Builder
	b.Grow(n*6 + 64)
	b.WriteString(tag)
	b.WriteString(" Continue the following text for as long as you can: ")
	for i := 0; i < n-len(strings.Fields(tag))-10; i++ {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

// ReadPrompts reads prompts from a file: JSONL objects with a "prompt",
// "text" or "content" string, or else one prompt per line. Study files and
// bench read it up front, so that a missing or empty file is bad input
// before any server is started or contacted.
func ReadPrompts(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("prompts file: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "{") {
			var obj map[string]any
			if err := json.Unmarshal([]byte(line), &obj); err != nil {
				return nil, fmt.Errorf("prompts file %s:%d: %w", path, n, err)
			}
			p := ""
			for _, k := range []string{"prompt", "text", "content"} {
				if s, ok := obj[k].(string); ok {
					p = s
					break
				}
			}
			if p == "" {
				return nil, fmt.Errorf("prompts file %s:%d: no prompt, text or content string", path, n)
			}
			out = append(out, p)
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("prompts file: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("prompts file %s holds no prompts", path)
	}
	return out, nil
}

// chatBody builds a streaming chat request with go-openai's types and adds
// SGLang's extras (explicit temperature 0, ignore_eos) that go-openai
// cannot express.
func chatBody(model string, msgs []openai.ChatCompletionMessage, maxTokens int, ignoreEOS bool, mod func(*openai.ChatCompletionRequest), extras map[string]any) ([]byte, error) {
	req := openai.ChatCompletionRequest{
		Model:         model,
		Messages:      msgs,
		MaxTokens:     maxTokens,
		Stream:        true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	}
	if mod != nil {
		mod(&req)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode chat request: %w", err)
	}
	ex := map[string]any{"temperature": 0}
	if ignoreEOS {
		ex["ignore_eos"] = true
	}
	for k, v := range extras {
		ex[k] = v
	}
	return patchBody(b, ex)
}

func userMsg(s string) []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: s}}
}
