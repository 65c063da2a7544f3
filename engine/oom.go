package engine

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// PyTorch's caching allocator reports a failed allocation as "CUDA out of
// memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19
// GiB of which 1.50 GiB is free." (c10/cuda/CUDACachingAllocator.cpp,
// torch >= 2.1; each size through format_size: bytes, KiB, MiB or GiB,
// two decimals). SGLang and vLLM surface it unchanged, in their own
// traceback or inside "Capture cuda graph failed: ...".
var reAllocFailed = regexp.MustCompile(`Tried to allocate ([0-9.]+) (bytes|KiB|MiB|GiB)\. GPU \d+ has a total capacity of ([0-9.]+) (bytes|KiB|MiB|GiB) of which ([0-9.]+) (bytes|KiB|MiB|GiB) is free`)

// unitBytes is the size of format_size's units.
var unitBytes = map[string]float64{"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

// OOMShortfall reads PyTorch's out-of-memory message in text and returns
// the share of the GPU's total capacity the failed allocation lacked:
// (tried - free) / total, less what the message's rounding can hide. The
// same allocation fails again unless at least that share more of the GPU
// is left outside the engine's static pools, so a memory fraction (SGLang's
// --mem-fraction-static, vLLM's --gpu-memory-utilization) must drop by at
// least that much; later allocations may need more. ok is false when text
// holds no such message.
func OOMShortfall(text string) (share float64, ok bool) {
	m := reAllocFailed.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	size := func(num, unit string) (v, half float64, ok bool) {
		x, err := strconv.ParseFloat(num, 64)
		if err != nil || x < 0 || math.IsInf(x, 0) {
			return 0, 0, false
		}
		// format_size prints two decimals except for bytes.
		half = 0.005 * unitBytes[unit]
		if unit == "bytes" {
			half = 0.5
		}
		return x * unitBytes[unit], half, true
	}
	tried, ht, ok1 := size(m[1], m[2])
	total, _, ok2 := size(m[3], m[4])
	free, hf, ok3 := size(m[5], m[6])
	if !ok1 || !ok2 || !ok3 || total <= 0 {
		return 0, false
	}
	return max(tried-ht-(free+hf), 0) / total, true
}

// PoolTooSmallIn reports whether text holds one of e's PoolTooSmall
// texts: a larger memory fraction, not a smaller one, fixes the failure.
func (e *Engine) PoolTooSmallIn(text string) bool {
	for _, t := range e.PoolTooSmall {
		if strings.Contains(text, t) {
			return true
		}
	}
	return false
}
