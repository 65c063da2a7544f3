package search

import (
	"sync/atomic"
	"testing"

	"github.com/c-bata/goptuna"
)

// TestRandomSamplerReachesBounds guards against goptuna's random sampler bug:
// int and step-int upper bounds must be reachable.
func TestRandomSamplerReachesBounds(t *testing.T) {
	cases := []struct {
		name string
		dist interface{}
		want []float64 // values that must all appear
	}{
		{"int", goptuna.IntUniformDistribution{Low: 1, High: 4}, []float64{1, 2, 3, 4}},
		{"step-int", goptuna.StepIntUniformDistribution{Low: 64, High: 512, Step: 64}, []float64{64, 128, 256, 384, 448, 512}},
		{"discrete", goptuna.DiscreteUniformDistribution{Low: 0.7, High: 0.9, Q: 0.1}, []float64{0.7, 0.8, 0.9}},
		{"categorical", goptuna.CategoricalDistribution{Choices: []string{"a", "b", "c"}}, []float64{0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newRandomSampler(1)
			seen := map[float64]bool{}
			for i := 0; i < 400; i++ {
				v, err := s.Sample(nil, goptuna.FrozenTrial{}, c.name, c.dist)
				if err != nil {
					t.Fatal(err)
				}
				seen[roundTo(v, 1e-9)] = true
			}
			for _, w := range c.want {
				if !seen[roundTo(w, 1e-9)] {
					t.Errorf("value %v never sampled; saw %v", w, seen)
				}
			}
		})
	}
}

func TestRandomSamplerFloatRanges(t *testing.T) {
	s := newRandomSampler(7)
	for i := 0; i < 200; i++ {
		v, _ := s.Sample(nil, goptuna.FrozenTrial{}, "f", goptuna.UniformDistribution{Low: 0.7, High: 0.9})
		if v < 0.7 || v > 0.9 {
			t.Fatalf("uniform sample %v out of [0.7, 0.9]", v)
		}
		v, _ = s.Sample(nil, goptuna.FrozenTrial{}, "l", goptuna.LogUniformDistribution{Low: 1, High: 1000})
		if v < 1 || v > 1000 {
			t.Fatalf("log-uniform sample %v out of [1, 1000]", v)
		}
	}
}

func TestRandomSamplerSeeded(t *testing.T) {
	a, b := newRandomSampler(42), newRandomSampler(42)
	d := goptuna.StepIntUniformDistribution{Low: 0, High: 1000, Step: 1}
	for i := 0; i < 50; i++ {
		x, _ := a.Sample(nil, goptuna.FrozenTrial{}, "x", d)
		y, _ := b.Sample(nil, goptuna.FrozenTrial{}, "x", d)
		if x != y {
			t.Fatalf("draw %d: %v != %v with the same seed", i, x, y)
		}
	}
}

// TestStartupSamplerSwitches checks the hand-over from random to the model
// sampler and the fall-back to random after repeated skipped proposals.
func TestStartupSamplerSwitches(t *testing.T) {
	st := &fakeStudy{}
	model := &constSampler{v: -1}
	var skips atomic.Int64
	s := &startupSampler{random: newRandomSampler(1), model: model, n: 2, skips: func() int { return int(skips.Load()) }}
	study, err := goptuna.CreateStudy("t", goptuna.StudyOptionStorage(st.storage()), goptuna.StudyOptionLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	dist := goptuna.IntUniformDistribution{Low: 0, High: 10}
	sample := func() float64 {
		v, err := s.Sample(study, goptuna.FrozenTrial{}, "x", dist)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := sample(); v == -1 {
		t.Fatal("model sampler used before the start-up trials finished")
	}
	for i := 0; i < 2; i++ {
		id, _ := study.Storage.CreateNewTrial(study.ID)
		_ = study.Storage.SetTrialValue(id, 1)
		_ = study.Storage.SetTrialState(id, goptuna.TrialStateComplete)
	}
	if v := sample(); v != -1 {
		t.Fatalf("got %v, want the model sampler's value after start-up", v)
	}
	skips.Store(2)
	if v := sample(); v == -1 {
		t.Fatal("model sampler used after 2 skipped proposals; want random")
	}
}

type constSampler struct{ v float64 }

func (c *constSampler) Sample(*goptuna.Study, goptuna.FrozenTrial, string, interface{}) (float64, error) {
	return c.v, nil
}

type fakeStudy struct{}

func (fakeStudy) storage() goptuna.Storage { return goptuna.NewInMemoryStorage() }

func roundTo(v, q float64) float64 { return float64(int64(v/q+0.5)) * q }
