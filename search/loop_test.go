package search

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

const testStudy = `name: unit
engine: {command: "true"}
model: m
params:
  - {name: ep, type: categorical, choices: [1, 4], flag: --ep-size}
  - {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}
budget: {trials: 3}
`

// newRunner opens a study in a fresh database the way Run does, without launching.
func newRunner(t *testing.T) *runner {
	t.Helper()
	st, err := space.Parse(filepath.Join(t.TempDir(), "unit.yaml"), []byte(testStudy))
	if err != nil {
		t.Fatal(err)
	}
	store, err := storage.Open(filepath.Join(t.TempDir(), "unit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r := &runner{st: st, store: store, out: &syncWriter{w: testWriter{t}}, budget: 3, owner: "test:1"}
	r.sampler = &startupSampler{random: newRandomSampler(1), model: newRandomSampler(1)}
	r.study, err = store.LoadOrCreateStudy(st.Name, goptuna.StudyDirectionMaximize,
		goptuna.StudyOptionStorage(store), goptuna.StudyOptionSampler(r.sampler), goptuna.StudyOptionLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r.uid, err = r.studyUID(); err != nil {
		t.Fatal(err)
	}
	return r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// addTrial stores a trial with the given params, state and owner.
func addTrial(t *testing.T, r *runner, params map[string]string, state string, owner string) int {
	t.Helper()
	id, err := r.store.CreateNewTrial(r.study.ID)
	if err != nil {
		t.Fatal(err)
	}
	trial := &goptuna.Trial{Study: r.study, ID: id}
	if _, err := trial.SuggestCategorical("ep", []string{"1", "4"}); err != nil {
		t.Fatal(err)
	}
	slots, _ := strconv.Atoi(params["slots"])
	if err := r.store.SetTrialParam(id, "slots", float64(slots), goptuna.StepIntUniformDistribution{Low: 64, High: 512, Step: 64}); err != nil {
		t.Fatal(err)
	}
	_ = r.store.SetTrialSystemAttr(id, attrOwner, owner)
	switch state {
	case StateComplete:
		_ = r.store.SetTrialValue(id, 100)
		_ = r.finish(id, goptuna.TrialStateComplete, map[string]string{attrState: StateComplete, attrScoreOK: "true", attrScore: "100"})
	case StateInterrupted:
		_ = r.finish(id, goptuna.TrialStateFail, map[string]string{attrState: StateInterrupted})
	case StateRunning:
	}
	return id
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestResumeTakesOverDeadOwnersAndQueuesRetries(t *testing.T) {
	r := newRunner(t)
	host := hostname()
	addTrial(t, r, map[string]string{"slots": "64"}, StateComplete, host+":1")
	dead := addTrial(t, r, map[string]string{"slots": "128"}, StateRunning, host+":"+strconv.Itoa(deadPID(t)))
	alive := addTrial(t, r, map[string]string{"slots": "192"}, StateRunning, host+":1") // pid 1 lives
	addTrial(t, r, map[string]string{"slots": "256"}, StateInterrupted, host+":1")

	if err := r.resume(); err != nil {
		t.Fatal(err)
	}
	recs, _ := Records(r.store, r.st.Name)
	byID := map[int]Record{}
	for _, rec := range recs {
		byID[rec.ID] = rec
	}
	if byID[dead].State != StateInterrupted {
		t.Errorf("trial of a dead owner: %s, want interrupted", byID[dead].State)
	}
	if byID[alive].State != StateRunning {
		t.Errorf("trial of a live owner: %s, want still running", byID[alive].State)
	}
	if len(r.retries) != 2 {
		t.Fatalf("want the dead owner's and the interrupted trial queued, got %d", len(r.retries))
	}
	if r.launched != 1 {
		t.Errorf("launched = %d, want 1 (the complete trial)", r.launched)
	}
	// The budget of 3 allows two more launches: both are the retries.
	for i := 0; i < 2; i++ {
		if rec, ok := r.claim(); !ok || rec == nil {
			t.Fatalf("claim %d: want a retry, got %v %v", i, rec, ok)
		}
	}
	if _, ok := r.claim(); ok {
		t.Error("claim beyond the budget succeeded")
	}
}

func TestRetryTieBreak(t *testing.T) {
	r := newRunner(t)
	first := addTrial(t, r, map[string]string{"slots": "64"}, StateRunning, "h:1")
	second := addTrial(t, r, map[string]string{"slots": "64"}, StateRunning, "h:2")
	for _, id := range []int{first, second} {
		if err := r.store.SetTrialSystemAttr(id, attrRetryOf, "7"); err != nil {
			t.Fatal(err)
		}
	}
	n1, _ := r.store.GetTrialNumberFromID(first)
	n2, _ := r.store.GetTrialNumberFromID(second)
	if _, lost := r.retryTaken(first, n1, 7); lost {
		t.Error("the lower-numbered retry lost the tie-break")
	}
	if w, lost := r.retryTaken(second, n2, 7); !lost || w != n1 {
		t.Errorf("the higher-numbered retry should yield to trial %d; got %d %v", n1, w, lost)
	}
}

func TestConfigKey(t *testing.T) {
	a := &space.Config{Flags: []string{"--model-path", "m", "--ep-size", "4"}, Env: map[string]string{"B": "2", "A": "1"}}
	b := &space.Config{Flags: []string{"--model-path", "m", "--ep-size", "4"}, Env: map[string]string{"A": "1", "B": "2"}}
	c := &space.Config{Flags: []string{"--model-path", "m", "--ep-size", "1"}, Env: map[string]string{"A": "1", "B": "2"}}
	if configKey(a) != configKey(b) {
		t.Errorf("same flags and env, different keys: %q %q", configKey(a), configKey(b))
	}
	if configKey(a) == configKey(c) {
		t.Error("different flags, same key")
	}
}

func TestReplayRebuildsParams(t *testing.T) {
	st, err := space.Parse("unit.yaml", []byte(testStudy))
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Suggest(&replay{params: map[string]interface{}{"ep": "4", "slots": 384}})
	if err != nil {
		t.Fatal(err)
	}
	if p.String() != "ep=4 slots=384" {
		t.Errorf("rebuilt params %v", p)
	}
	if _, err := st.Suggest(&replay{params: map[string]interface{}{"ep": "4"}}); err == nil {
		t.Error("a missing stored value must be an error without a fallback sampler")
	}
}
