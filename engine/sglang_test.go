package engine

import (
	"strings"
	"testing"
)

func TestParseFacts(t *testing.T) {
	tests := []struct {
		name  string
		log   string
		want  Facts
		ready bool
	}{
		{
			name: "MAIN summary with TP/EP prefix",
			log:  "[2026-02-12 11:38:29 TP0 EP0] max_total_num_tokens=1171862, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=51, context_len=202752, available_gpu_mem=9.30 GB\n",
			want: Facts{MaxTotalNumTokens: 1171862, ChunkedPrefillSize: 8192, MaxPrefillTokens: 16384,
				MaxRunningRequests: 51, ContextLen: 202752, AvailableGPUMemGB: 9.30},
		},
		{
			name: "first summary wins (other DP ranks follow)",
			log: "[2026-02-12 11:38:29 DP0 TP0] max_total_num_tokens=500000, chunked_prefill_size=4096, max_prefill_tokens=16384, max_running_requests=64, context_len=131072, available_gpu_mem=12.00 GB\n" +
				"[2026-02-12 11:38:29 DP1 TP1] max_total_num_tokens=400000, chunked_prefill_size=4096, max_prefill_tokens=16384, max_running_requests=32, context_len=131072, available_gpu_mem=11.00 GB\n",
			want: Facts{MaxTotalNumTokens: 500000, ChunkedPrefillSize: 4096, MaxPrefillTokens: 16384,
				MaxRunningRequests: 64, ContextLen: 131072, AvailableGPUMemGB: 12},
		},
		{
			name: "server_args is not the summary",
			log:  "[2026-02-12 11:38:20] server_args=ServerArgs(model_path='m', max_running_requests=64, max_total_tokens=None, chunked_prefill_size=None, context_length=None)\n",
			want: Facts{},
		},
		{
			name: "mamba pool with spec suffix",
			log:  "[2026-02-12 11:38:25 TP0 EP0] Mamba Cache is allocated. max_mamba_cache_size: 256, conv_state size: 1.23GB, ssm_state size: 20.50GB intermediate_ssm_state_cache size: 3.00GB intermediate_conv_window_cache size: 0.10GB \n",
			want: Facts{MambaCacheSize: 256},
		},
		{
			name: "KV pool MAIN",
			log:  "[2026-02-12 11:38:25 TP0 EP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1171862, K size: 10.06 GB, V size: 10.06 GB\n",
			want: Facts{KVCacheTokens: 1171862},
		},
		{
			name: "KV pool FEB and MLA",
			log: "[2026-02-12 11:38:25 TP0] KV Cache is allocated. #tokens: 524288, K size: 4.00 GB, V size: 4.00 GB\n" +
				"[2026-02-12 11:38:25 TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 800000, KV size: 30.50 GB\n",
			want: Facts{KVCacheTokens: 524288},
		},
		{
			name: "reduction warning",
			log:  "[2026-02-12 11:38:27 TP0 EP0] max_running_requests was reduced from the requested 64 to 51 (per dp worker) due to the available KV cache capacity.\n",
			want: Facts{RequestedMaxRunningRequests: 64, ReducedMaxRunningRequests: 51},
		},
		{
			name: "MAIN graph capture end",
			log: "[2026-02-12 11:38:26 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4], avail mem=12.00 GB\n" +
				"Capturing batches (bs=4 avail_mem=11.9 GB):  33%|###  | 1/3\rCapturing batches (bs=1 avail_mem=11.8 GB): 100%|#####| 3/3\n" +
				"[2026-02-12 11:38:28 TP0] Capture target decode CUDA graph end. elapsed=3.21 s, mem usage=0.50 GB, avail mem=11.50 GB.\n",
			want: Facts{CUDAGraph: true},
		},
		{
			name: "FEB graph capture end",
			log:  "[2026-02-12 11:38:28 TP0] Capture cuda graph end. Time elapsed: 12.34 s. mem usage=1.23 GB. avail mem=8.00 GB.\n",
			want: Facts{CUDAGraph: true},
		},
		{
			name: "capture begun but not ended",
			log:  "[2026-02-12 11:38:26 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=12.00 GB\n",
			want: Facts{},
		},
		{
			name:  "ready line, CRLF and no final newline",
			log:   "[2026-02-12 11:38:31] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)\r\n[2026-02-12 11:38:35] The server is fired up and ready to roll!",
			want:  Facts{},
			ready: true,
		},
		{
			// A dense model has no Mamba pool: its facts are the KV pool,
			// the summary and the graphs, with no state slots.
			name: "dense model startup without a Mamba pool",
			log: "[2026-02-12 11:38:20 TP0] Load weight end. elapsed=8.00 s, type=LlamaForCausalLM, avail mem=70.10 GB, mem usage=8.00 GB.\n" +
				"[2026-02-12 11:38:21 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 921354, K size: 28.12 GB, V size: 28.12 GB\n" +
				"[2026-02-12 11:38:21 TP0] Memory pool end. avail mem=13.03 GB\n" +
				"[2026-02-12 11:38:22 TP0] Capture target decode CUDA graph end. elapsed=12.00 s, mem usage=1.60 GB, avail mem=11.03 GB.\n" +
				"[2026-02-12 11:38:22 TP0] max_total_num_tokens=921354, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=3599, context_len=131072, available_gpu_mem=11.03 GB\n" +
				"[2026-02-12 11:38:23 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False\n" +
				"[2026-02-12 11:38:23] The server is fired up and ready to roll!\n",
			want: Facts{KVCacheTokens: 921354, CUDAGraph: true, MaxTotalNumTokens: 921354, ChunkedPrefillSize: 8192, MaxPrefillTokens: 16384,
				MaxRunningRequests: 3599, ContextLen: 131072, AvailableGPUMemGB: 11.03},
			ready: true,
		},
		{
			name: "runtime lines are not facts",
			log:  "[2026-02-12 11:39:00 TP0] Decode batch, #running-req: 64, #token: 9000, token usage: 0.01, cuda graph: True, gen throughput (token/s): 1500.00, #queue-req: 0\n",
			want: Facts{},
		},
		{
			name: "huge values do not wrap",
			log:  "max_total_num_tokens=99999999999999999999999, max_running_requests=5\n",
			want: Facts{MaxRunningRequests: 5},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SGLang.ParseLog(strings.NewReader(tc.log)); got != tc.want {
				t.Errorf("ParseFacts\n got %+v\nwant %+v", got, tc.want)
			}
			p := SGLang.NewLogParser()
			for l := range strings.SplitSeq(tc.log, "\n") {
				p.Line(l)
			}
			if p.Ready() != tc.ready {
				t.Errorf("Ready = %v", p.Ready())
			}
		})
	}
}

func TestParseFactsOverlongLine(t *testing.T) {
	log := strings.Repeat("x", 2<<20) + "\nmax_total_num_tokens=7, max_running_requests=3\n"
	if got := SGLang.ParseLog(strings.NewReader(log)); got.MaxTotalNumTokens != 7 || got.MaxRunningRequests != 3 {
		t.Errorf("after an over-long line: %+v", got)
	}
}
