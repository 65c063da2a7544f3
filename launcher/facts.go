package launcher

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Startup log patterns (SGLang scheduler/memory_pool/http_server texts, see
// reference/sglang.md §3). They match anywhere in a line, so the
// "[2026-02-12 11:38:29 TP0 EP0] " prefix and ANSI-free tqdm noise are ignored.
var (
	// scheduler.py summary, TP rank 0 only; its max_running_requests is the
	// effective per-DP value after all caps.
	reSummaryTokens  = regexp.MustCompile(`\bmax_total_num_tokens=(\d+)`)
	reSummaryRunning = regexp.MustCompile(`\bmax_running_requests=(\d+)`)
	reSummaryChunked = regexp.MustCompile(`\bchunked_prefill_size=(-?\d+)`)
	reSummaryPrefill = regexp.MustCompile(`\bmax_prefill_tokens=(\d+)`)
	reSummaryContext = regexp.MustCompile(`\bcontext_len=(\d+)`)
	reSummaryAvail   = regexp.MustCompile(`\bavailable_gpu_mem=([0-9.]+)`)
	reMamba          = regexp.MustCompile(`Mamba Cache is allocated\. max_mamba_cache_size: (\d+)`)
	reKV             = regexp.MustCompile(`KV Cache is allocated\..*?#tokens: (\d+)`)
	reReduced        = regexp.MustCompile(`max_running_requests was reduced from the requested (\d+) to (\d+)`)
	// MAIN "Capture target decode CUDA graph end.", FEB "Capture cuda graph
	// end.", and piecewise/draft variants.
	reGraphEnd = regexp.MustCompile(`(?i)\bcapture\b.*\bcuda graph end\b`)
)

// ReadyLine is what SGLang logs once warmup succeeded (http_server.py).
const ReadyLine = "The server is fired up and ready to roll!"

// FactParser accumulates Facts from startup log lines, one line at a time.
// The zero value is ready to use. It is not safe for concurrent use.
type FactParser struct {
	f       Facts
	summary bool // the scheduler summary was seen; later summaries (other DP ranks) are ignored
	ready   bool
}

// Line feeds one log line (with or without its trailing newline).
func (p *FactParser) Line(line string) {
	line = lastFrame(line)
	if strings.Contains(line, ReadyLine) {
		p.ready = true
		return
	}
	if !p.summary && strings.Contains(line, "max_total_num_tokens=") {
		if m := reSummaryTokens.FindStringSubmatch(line); m != nil {
			p.summary = true
			p.f.MaxTotalNumTokens = atoi(m[1])
			if m := reSummaryRunning.FindStringSubmatch(line); m != nil {
				p.f.MaxRunningRequests = atoi(m[1])
			}
			if m := reSummaryChunked.FindStringSubmatch(line); m != nil {
				p.f.ChunkedPrefillSize = atoi(m[1])
			}
			if m := reSummaryPrefill.FindStringSubmatch(line); m != nil {
				p.f.MaxPrefillTokens = atoi(m[1])
			}
			if m := reSummaryContext.FindStringSubmatch(line); m != nil {
				p.f.ContextLen = atoi(m[1])
			}
			if m := reSummaryAvail.FindStringSubmatch(line); m != nil {
				p.f.AvailableGPUMemGB, _ = strconv.ParseFloat(m[1], 64)
			}
		}
		return
	}
	switch {
	case strings.Contains(line, "Mamba Cache is allocated"):
		if m := reMamba.FindStringSubmatch(line); m != nil && p.f.MambaCacheSize == 0 {
			p.f.MambaCacheSize = atoi(m[1])
		}
	case strings.Contains(line, "KV Cache is allocated"):
		if m := reKV.FindStringSubmatch(line); m != nil && p.f.KVCacheTokens == 0 {
			p.f.KVCacheTokens = atoi(m[1])
		}
	case strings.Contains(line, "was reduced from the requested"):
		if m := reReduced.FindStringSubmatch(line); m != nil && p.f.RequestedMaxRunningRequests == 0 {
			p.f.RequestedMaxRunningRequests = atoi(m[1])
			p.f.ReducedMaxRunningRequests = atoi(m[2])
		}
	case reGraphEnd.MatchString(line):
		p.f.CUDAGraph = true
	}
}

// Facts returns what was parsed so far. StartupS is left to the launcher.
func (p *FactParser) Facts() Facts { return p.f }

// Ready reports whether the ready line was seen.
func (p *FactParser) Ready() bool { return p.ready }

// lastFrame drops the trailing newline and, for tqdm-style redraws joined
// by \r, everything but the last frame.
func lastFrame(line string) string {
	line = strings.TrimRight(line, "\r\n")
	if i := strings.LastIndexByte(line, '\r'); i >= 0 {
		line = line[i+1:]
	}
	return line
}

// ParseFacts reads a whole startup log and returns its facts. Lines longer
// than 1 MiB are skipped.
func ParseFacts(r io.Reader) Facts {
	var p FactParser
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for {
		for sc.Scan() {
			p.Line(sc.Text())
		}
		if sc.Err() != bufio.ErrTooLong {
			break
		}
		// Skip the rest of an over-long line and continue.
		sc = bufio.NewScanner(skipLine(r))
		sc.Buffer(make([]byte, 64*1024), 1<<20)
	}
	return p.Facts()
}

// skipLine discards r up to and including the next newline.
func skipLine(r io.Reader) io.Reader {
	br := bufio.NewReader(r)
	_, _ = br.ReadString('\n')
	return br
}

// atoi parses a decimal that the regexp already validated; on overflow it
// returns 0 rather than a wrapped value.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}
