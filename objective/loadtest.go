package objective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Reader names a way of reading streams, for LoadTest.
type Reader string

// Readers LoadTest can compare.
const (
	// ReaderSgtune is sgtune's bufio SSE reader with the in-place chunk parser.
	ReaderSgtune Reader = "sgtune"
	// ReaderOpenAIRecv is go-openai's plain Recv(): a full decode of every chunk.
	ReaderOpenAIRecv Reader = "openai-recv"
	// ReaderOpenAIRecvRaw is go-openai's RecvRaw() with sgtune's chunk parser.
	ReaderOpenAIRecvRaw Reader = "openai-recvraw"
)

// LoadTest runs n streaming chat requests of maxTokens (ignore_eos) at
// concurrency conc, reading the streams with reader, and returns the point
// and its request records. It is the load generator's benchmark hook.
func LoadTest(ctx context.Context, t Target, reader Reader, conc, n, maxTokens int) (Point, []RequestRecord, error) {
	c := newClient(t, conc)
	defer c.close()
	model, _, err := c.resolveModel(ctx, t.Model)
	if err != nil {
		return Point{}, nil, err
	}
	bodies := make([][]byte, n)
	prompts := make([]string, n)
	for i := range bodies {
		prompts[i] = fmt.Sprintf("load test request %d: say something long", i)
		if bodies[i], err = chatBody(model, userMsg(prompts[i]), maxTokens, true, nil, nil); err != nil {
			return Point{}, nil, err
		}
	}
	hang := DefaultHangTimeout
	switch reader {
	case ReaderSgtune:
		b, err := c.closedLoop(ctx, bodies, conc, hang, false)
		p, recs := b.point("", conc, 1, 0)
		return p, recs, err
	case ReaderOpenAIRecv, ReaderOpenAIRecvRaw:
		oc := NewOpenAIClient(Target{URL: t.URL, APIKey: t.APIKey}, conc, map[string]any{"temperature": 0, "ignore_eos": true})
		return openAILoop(ctx, oc, reader, model, prompts, conc, maxTokens)
	}
	return Point{}, nil, fmt.Errorf("unknown reader %q", reader)
}

// openAILoop is closedLoop with go-openai's stream reader, for comparison.
func openAILoop(ctx context.Context, oc *openai.Client, reader Reader, model string, prompts []string, conc, maxTokens int) (Point, []RequestRecord, error) {
	recs := make([]RequestRecord, len(prompts))
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for i := range next {
				recs[i] = openAIOne(ctx, oc, reader, model, prompts[i], maxTokens)
				recs[i].StartS = 0
			}
		})
	}
feed:
	for i := range prompts {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	b := &batch{requested: len(prompts), wall: time.Since(start)}
	for i := range recs {
		r := &streamResult{rec: recs[i]}
		b.results = append(b.results, r)
		b.issued++
		if r.rec.OK {
			b.completed++
		} else {
			b.failed++
		}
		b.tokens += int64(r.rec.OutputTokens)
	}
	p, out := b.point("", conc, 1, 0)
	return p, out, ctx.Err()
}

func openAIOne(ctx context.Context, oc *openai.Client, reader Reader, model, prompt string, maxTokens int) RequestRecord {
	var rec RequestRecord
	start := time.Now()
	st, err := oc.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{
		Model: model, Messages: userMsg(prompt), MaxTokens: maxTokens, Stream: true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	})
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	defer st.Close()
	var first time.Time
	counted, usage := 0, -1
	var ch chunk
	for {
		var content, reasoning bool
		var now time.Time
		if reader == ReaderOpenAIRecv {
			resp, err := st.Recv()
			now = time.Now()
			if errors.Is(err, io.EOF) {
				rec.OK = true
				break
			}
			if err != nil {
				rec.Error = err.Error()
				break
			}
			rec.Chunks++
			if len(resp.Choices) > 0 {
				content = resp.Choices[0].Delta.Content != ""
				reasoning = resp.Choices[0].Delta.ReasoningContent != ""
			}
			if resp.Usage != nil {
				usage = resp.Usage.CompletionTokens
			}
		} else {
			raw, err := st.RecvRaw()
			now = time.Now()
			if errors.Is(err, io.EOF) {
				rec.OK = true
				break
			}
			if err != nil {
				rec.Error = err.Error()
				break
			}
			rec.Chunks++
			if err := parseChunk(raw, &ch); err != nil {
				rec.Error = err.Error()
				break
			}
			content, reasoning = len(ch.Content) > 0, len(ch.Reasoning) > 0
			if ch.HasUsage {
				usage = ch.CompletionTokens
			}
		}
		if content || reasoning {
			if first.IsZero() {
				first = now
			}
			counted++
		}
		rec.Latency = now.Sub(start).Seconds()
	}
	if !first.IsZero() {
		rec.TTFT = first.Sub(start).Seconds()
	}
	rec.OutputTokens = counted
	if usage >= 0 {
		rec.OutputTokens = usage
	}
	return rec
}
