package report

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// IsReport knows the files WriteReport writes, also from an sgtune from
// before the mark, and nothing else.
func TestIsReport(t *testing.T) {
	dir := t.TempDir()
	if err := WriteReport(dir, fixture()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"index.html", "report.md"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !IsReport(b) {
			t.Errorf("%s: not a report", name)
		}
		if old := bytes.Replace(b, []byte(reportMark), nil, 1); len(old) == len(b) || !IsReport(old) {
			t.Errorf("%s without the mark: not a report", name)
		}
	}
	for _, b := range []string{
		"", "<!DOCTYPE html>\n<html><title>my page</title></html>\n",
		"# Study notes\n\nwhat I found\n", "<svg></svg>",
	} {
		if IsReport([]byte(b)) {
			t.Errorf("%q taken for a report", b)
		}
	}
}

func TestForeign(t *testing.T) {
	dir := t.TempDir()
	if got, err := Foreign(filepath.Join(dir, "missing")); err != nil || got != nil {
		t.Errorf("missing directory: %v, %v", got, err)
	}
	if err := WriteReport(dir, fixture()); err != nil {
		t.Fatal(err)
	}
	// An earlier report's plots are its own; another index.html is not.
	if got, err := Foreign(dir); err != nil || got != nil {
		t.Errorf("earlier report: %v, %v", got, err)
	}
	page := filepath.Join(dir, "index.html")
	if err := os.WriteFile(page, []byte("<html>mine</html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Foreign(dir); err != nil || !slices.Equal(got, []string{page}) {
		t.Errorf("another index.html: %v, %v", got, err)
	}
	// Without a report, the plots' names are someone else's files.
	md := filepath.Join(dir, "report.md")
	if err := os.Remove(md); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(page); err != nil {
		t.Fatal(err)
	}
	if got, err := Foreign(dir); err != nil || len(got) < 4 || !slices.Contains(got, filepath.Join(dir, "pareto.svg")) {
		t.Errorf("plots without a report: %v, %v", got, err)
	}
	// A directory named report.md is not a report.
	if err := os.Mkdir(md, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Foreign(dir); err != nil || !slices.Contains(got, md) {
		t.Errorf("report.md a directory: %v, %v", got, err)
	}
}
