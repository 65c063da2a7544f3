package storage

import (
	"testing"

	"github.com/c-bata/goptuna"
)

// BenchmarkTrialLifecycle is the write path of one trial as goptuna drives
// it: create, 6 params, value, state (9 write transactions).
func BenchmarkTrialLifecycle(b *testing.B) {
	s := newStore(b)
	study, err := s.CreateNewStudy("bench")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		id, err := s.CreateNewTrial(study)
		if err != nil {
			b.Fatal(err)
		}
		for name, d := range allDists {
			if err := s.SetTrialParam(id, name, allInternal[name], d); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.SetTrialValue(id, 1); err != nil {
			b.Fatal(err)
		}
		if err := s.SetTrialState(id, goptuna.TrialStateComplete); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetAllTrials200 is what TPE pays per suggested parameter in a
// 200-trial study.
func BenchmarkGetAllTrials200(b *testing.B) {
	s := newStore(b)
	study, err := s.CreateNewStudy("bench")
	if err != nil {
		b.Fatal(err)
	}
	for i := range 200 {
		base := goptuna.FrozenTrial{State: goptuna.TrialStateComplete, Value: float64(i),
			InternalParams: allInternal, Distributions: allDists,
			UserAttrs: map[string]string{"sgtune.config": `{"flags":["--tp","4","--ep","4"]}`}}
		if _, err := s.CloneTrial(study, base); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		ts, err := s.GetAllTrials(study)
		if err != nil || len(ts) != 200 {
			b.Fatal(len(ts), err)
		}
	}
}
