package sampler

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/c-bata/goptuna"
)

var gridSpace = []spaceParam{
	{name: "a", dist: goptuna.StepIntUniformDistribution{Low: 0, High: 64, Step: 32}},
	{name: "b", dist: cat("x", "y")},
}

func gridDists() map[string]interface{} {
	d := map[string]interface{}{}
	for _, sp := range gridSpace {
		d[sp.name] = sp.dist
	}
	return d
}

func TestGridPoints(t *testing.T) {
	got, err := GridPoints(gridDists())
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]float64{
		{"a": 0, "b": 0}, {"a": 0, "b": 1}, {"a": 32, "b": 0}, {"a": 32, "b": 1}, {"a": 64, "b": 0}, {"a": 64, "b": 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GridPoints = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		dists map[string]interface{}
		err   string
	}{
		{map[string]interface{}{"x": goptuna.UniformDistribution{Low: 0, High: 1}}, "param x: a continuous range has no grid"},
		{map[string]interface{}{"x": goptuna.IntUniformDistribution{Low: 0, High: 1 << 30}}, "exceeds"},
	} {
		if _, err := GridPoints(tc.dists); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("GridPoints(%v) error %v, want %q", tc.dists, err, tc.err)
		}
	}
}

// TestGridOrder: trial k gets point k, counted by trial number among the
// study's trials (not by the order the asks sample in); past the end the
// grid is exhausted.
func TestGridOrder(t *testing.T) {
	points, _ := GridPoints(gridDists())
	g, err := NewGrid(points, 1)
	if err != nil {
		t.Fatal(err)
	}
	study := newStudy(t, g, goptuna.StudyDirectionMinimize)
	// Two asks created before either samples; the second samples first.
	id0, err := study.Storage.CreateNewTrial(study.ID)
	if err != nil {
		t.Fatal(err)
	}
	id1, err := study.Storage.CreateNewTrial(study.ID)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := suggestAll(goptuna.Trial{Study: study, ID: id1}, gridSpace)
	if err != nil {
		t.Fatal(err)
	}
	v0, err := suggestAll(goptuna.Trial{Study: study, ID: id0}, gridSpace)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v0, points[0]) || !reflect.DeepEqual(v1, points[1]) {
		t.Fatalf("trials 0, 1 got %v, %v; want %v, %v", v0, v1, points[0], points[1])
	}
	tell(t, study, id0, goptuna.TrialStateComplete, 1)
	tell(t, study, id1, goptuna.TrialStatePruned, 0)
	for k := 2; k < len(points); k++ {
		id, v := ask(t, study, gridSpace)
		if !reflect.DeepEqual(v, points[k]) {
			t.Fatalf("trial %d got %v, want %v", k, v, points[k])
		}
		tell(t, study, id, goptuna.TrialStateComplete, 1)
	}
	id, err := study.Storage.CreateNewTrial(study.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := suggestAll(goptuna.Trial{Study: study, ID: id}, gridSpace); !errors.Is(err, ErrGridExhausted) {
		t.Errorf("past the last point: error %v, want ErrGridExhausted", err)
	}
}

func TestGridCursorAndCounts(t *testing.T) {
	points, _ := GridPoints(gridDists())
	// Explicit cursor.
	g, _ := NewGrid(points, 1)
	study := newStudy(t, g, goptuna.StudyDirectionMinimize)
	id, _ := study.Storage.CreateNewTrial(study.ID)
	if err := study.Storage.SetTrialSystemAttr(id, GridIndexAttr, "4"); err != nil {
		t.Fatal(err)
	}
	v, err := suggestAll(goptuna.Trial{Study: study, ID: id}, gridSpace)
	if err != nil || !reflect.DeepEqual(v, points[4]) {
		t.Errorf("cursor 4: got %v, %v; want %v", v, err, points[4])
	}
	// Counting only some earlier trials: re-runs (marked) do not consume a point.
	g, _ = NewGrid(points, 1, WithGridCounts(func(ft goptuna.FrozenTrial) bool { return ft.UserAttrs["rerun"] == "" }))
	study = newStudy(t, g, goptuna.StudyDirectionMinimize)
	for i := 0; i < 3; i++ {
		id, v := ask(t, study, gridSpace)
		if i == 1 {
			if err := study.Storage.SetTrialUserAttr(id, "rerun", "yes"); err != nil {
				t.Fatal(err)
			}
		}
		want := points[min(i, 1)]
		if !reflect.DeepEqual(v, want) {
			t.Errorf("ask %d got %v, want %v", i, v, want)
		}
		tell(t, study, id, goptuna.TrialStateComplete, 1)
	}
}

func TestGridShuffleAndConditional(t *testing.T) {
	points := make([]map[string]float64, 10)
	for i := range points {
		points[i] = map[string]float64{"a": float64(i % 3 * 32)}
		if i%2 == 0 {
			points[i]["b"] = 1
		}
	}
	order := func(seed int64) []map[string]float64 {
		g, err := NewGrid(points, seed, WithGridShuffle(true))
		if err != nil {
			t.Fatal(err)
		}
		return g.points
	}
	a, b, c := order(1), order(1), order(2)
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed, different shuffles")
	}
	if reflect.DeepEqual(a, c) || reflect.DeepEqual(a, points) {
		t.Error("shuffle did not change the order")
	}
	// A param absent from the point is drawn like Random, reproducibly.
	g, _ := NewGrid(points, 3)
	study := newStudy(t, g, goptuna.StudyDirectionMinimize)
	var got []float64
	for k := 0; k < 2; k++ {
		_, v := ask(t, study, gridSpace)
		got = append(got, v["b"])
	}
	if got[0] != 1 {
		t.Errorf("point 0 holds b=1, got %v", got[0])
	}
	want, _ := NewRandom(3).Sample(study, fresh(1, nil, nil), "b", gridSpace[1].dist)
	if got[1] != want {
		t.Errorf("point 1 lacks b: got %v, want Random's draw %v", got[1], want)
	}
}

func TestGridRejectsForeignValues(t *testing.T) {
	for _, v := range []float64{16, 96, -32} { // off the step grid, above, below
		g, _ := NewGrid([]map[string]float64{{"a": v}}, 1)
		study := newStudy(t, g, goptuna.StudyDirectionMinimize)
		id, _ := study.Storage.CreateNewTrial(study.ID)
		_, err := suggestAll(goptuna.Trial{Study: study, ID: id}, gridSpace[:1])
		if err == nil || !strings.Contains(err.Error(), "grid point 0: param a = "+strconv.FormatFloat(v, 'g', -1, 64)) {
			t.Errorf("a=%v: error %v, want one naming point, param and value", v, err)
		}
	}
	if _, err := NewGrid(nil, 1); err == nil {
		t.Error("empty grid: want an error")
	}
}
