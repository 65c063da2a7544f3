package launcher

import (
	"github.com/sgtune/sgtune/engine"

	"strings"
	"testing"
)

func TestClassifyLog(t *testing.T) {
	for _, tc := range []struct {
		name   string
		log    string
		code   int
		ready  bool
		class  string
		reason string
	}{
		{"oom at startup", "[2026] Load weight end.\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB\n", 1, false, engine.ClassOOM, "torch.OutOfMemoryError"},
		{"crash under load", "The server is fired up and ready to roll!\nScheduler hit an exception:\nRuntimeError: CUDA error: an illegal memory access was encountered\n", 1, true, engine.ClassIllegalMemoryAccess, "RuntimeError: CUDA error"},
		{"usage error", "usage: launch_server.py [-h]\nlaunch_server.py: error: unrecognized arguments: --x\n", 2, false, engine.ClassBadCommand, "unrecognized arguments"},
		{"other startup exit", "RuntimeError: CUDA error: invalid device ordinal\n", 1, false, engine.ClassStartupCrash, "invalid device ordinal"},
		{"exit after ready", "The server is fired up and ready to roll!\n", 1, true, engine.ClassCrashed, "exited with status 1"},
	} {
		f := ClassifyLog(engine.SGLang, strings.NewReader(tc.log), tc.code, tc.ready)
		if f.Class != tc.class || f.ExitCode != tc.code || !strings.Contains(f.Reason, tc.reason) || f.Tail == "" {
			t.Errorf("%s: %+v, want class %s and a reason with %q", tc.name, f, tc.class, tc.reason)
		}
	}
}
