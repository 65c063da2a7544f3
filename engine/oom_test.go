package engine

import (
	"math"
	"testing"
)

func TestOOMShortfall(t *testing.T) {
	for _, tc := range []struct {
		name  string
		text  string
		share float64
		ok    bool
	}{
		{"GiB free", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 80.00 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.9 GiB memory in use.",
			(4 - 0.005 - 1.005) / 80, true},
		{"MiB free, inside a graph capture", "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 139.81 GiB of which 512.00 MiB is free.",
			(2 - 0.005 - (512+0.005)/1024) / 139.81, true},
		{"nothing free", "CUDA out of memory. Tried to allocate 2.67 GiB. GPU 0 has a total capacity of 15.98 GiB of which 0 bytes is free.",
			(2.67 - 0.005 - 0.5/(1<<30)) / 15.98, true},
		{"more free than tried (fragmentation)", "CUDA out of memory. Tried to allocate 96.00 MiB. GPU 0 has a total capacity of 23.56 GiB of which 164.94 MiB is free.",
			0, true},
		{"torch < 2.1 wording", "RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 47.06 MiB free)", 0, false},
		{"no sizes", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", 0, false},
		{"a pool too small, not an allocation", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			share, ok := OOMShortfall(tc.text)
			if ok != tc.ok || math.Abs(share-tc.share) > 1e-9 {
				t.Errorf("OOMShortfall = %g, %v; want %g, %v", share, ok, tc.share, tc.ok)
			}
		})
	}
}

func FuzzOOMShortfall(f *testing.F) {
	f.Add("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 80.00 GiB of which 1.00 GiB is free.")
	f.Add("Tried to allocate 0 bytes. GPU 0 has a total capacity of 0 bytes of which 0 bytes is free")
	f.Add("Tried to allocate 1e999 GiB. GPU 0 has a total capacity of 1.00 KiB of which 9.9 MiB is free")
	f.Fuzz(func(t *testing.T, text string) {
		share, ok := OOMShortfall(text)
		if !ok && share != 0 {
			t.Fatalf("not ok but share %g", share)
		}
		if math.IsNaN(share) || share < 0 {
			t.Fatalf("share %g of %q", share, text)
		}
	})
}

// A pool-too-small text is an out-of-memory failure to the engine's own
// classification, and names no allocation a lower fraction would fit.
func TestPoolTooSmallIsOOM(t *testing.T) {
	for _, e := range All() {
		for _, text := range e.PoolTooSmall {
			if sig, _ := e.Classify("RuntimeError: " + text + "."); sig == nil || sig.Class != ClassOOM {
				t.Errorf("%s: %q does not classify as %s", e.Name, text, ClassOOM)
			}
			if _, ok := OOMShortfall(text); ok {
				t.Errorf("%s: %q reads as an allocation's shortfall", e.Name, text)
			}
		}
	}
}
