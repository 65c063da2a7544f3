package engine

import "testing"

// A docker export runs the image of the version whose flag schema checked
// the flags, not :latest.
func TestImageFor(t *testing.T) {
	for _, tc := range []struct {
		e       *Engine
		version string
		want    string
	}{
		{SGLang, "v0.5.21", "lmsysorg/sglang:v0.5.21"},
		{SGLang, "0.5.5.post1", "lmsysorg/sglang:v0.5.5.post1"},
		{SGLang, "v0.5.0rc0", "lmsysorg/sglang:v0.5.0rc0"},
		{SGLang, "lmsysorg/sglang@sha256:b1259f3e", "lmsysorg/sglang@sha256:b1259f3e"},
		{SGLang, "", "lmsysorg/sglang:latest"},
		{SGLang, "main-nightly", "lmsysorg/sglang:latest"},
		{VLLM, "v0.11.1", "vllm/vllm-openai:v0.11.1"},
		{VLLM, "vllm/vllm-openai:v0.11.1", "vllm/vllm-openai:v0.11.1"},
		// llama.cpp's images are tagged by build (server-b6000), not by a
		// release version.
		{LlamaCpp, "v0.4.0", LlamaCpp.Image},
		{LlamaCpp, "b6000", "ghcr.io/ggml-org/llama.cpp:server-b6000"},
		{LlamaCpp, "ghcr.io/ggml-org/llama.cpp:server-b6000", "ghcr.io/ggml-org/llama.cpp:server-b6000"},
		{SGLang, "b6000", "lmsysorg/sglang:latest"},
	} {
		if got := tc.e.ImageFor(tc.version); got != tc.want {
			t.Errorf("%s.ImageFor(%q) = %q, want %q", tc.e.Name, tc.version, got, tc.want)
		}
	}
}
