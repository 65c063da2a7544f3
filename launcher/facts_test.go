package launcher

import (
	"bytes"
	"testing"

	"github.com/sgtune/sgtune/engine"
)

// FuzzParseLog checks that parsing never panics, never yields negative
// counts (except chunked prefill, where -1 means disabled), and that the
// log sink (any chunking, no secrets) sees the same facts as ParseLog.
func FuzzParseLog(f *testing.F) {
	f.Add([]byte("[2026-02-12 11:38:29 TP0 EP0] max_total_num_tokens=1171862, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=51, context_len=202752, available_gpu_mem=9.30 GB\n"), uint16(40))
	f.Add([]byte("Mamba Cache is allocated. max_mamba_cache_size: 256, conv\nKV Cache is allocated. #tokens: 5, K\r\nmax_running_requests was reduced from the requested 64 to 51 (per dp"), uint16(3))
	f.Add([]byte("Capture cuda graph end.\rThe server is fired up and ready to roll!\n"), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		want := engine.SGLang.ParseLog(bytes.NewReader(data))
		for _, n := range []int{want.MaxTotalNumTokens, want.MaxRunningRequests, want.MambaCacheSize, want.KVCacheTokens,
			want.RequestedMaxRunningRequests, want.ReducedMaxRunningRequests, want.MaxPrefillTokens, want.ContextLen} {
			if n < 0 {
				t.Fatalf("negative count in %+v", want)
			}
		}
		if len(data) > maxPartial {
			return // the sink flushes long partial lines differently
		}
		s := newLineSink(nil, newRedactor(nil), engine.SGLang)
		c := min(int(cut), len(data))
		_, _ = s.Write(data[:c])
		_, _ = s.Write(data[c:])
		s.flush()
		got, _, _ := s.state()
		if got != want {
			t.Fatalf("sink %+v\nParseLog %+v", got, want)
		}
	})
}
