package report

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// reportMark opens report.md and, after its doctype, index.html: a file
// that carries it was written by WriteReport, which may replace it.
const reportMark = "<!-- Written by sgtune report; sgtune report -o rewrites this file. -->\n"

// Reports written before reportMark existed: the page's title, and the
// markdown's heading and summary line.
var (
	legacyPage     = regexp.MustCompile(`^<!DOCTYPE html>\n<html lang="en">\n<head>\n(?:<meta [^\n]*\n)*<title>sgtune · study `)
	legacyMarkdown = regexp.MustCompile(`^# Study [^\n]*\n\n\d+ trials \([^\n]*\); \d+(?: of \d+)? search launches`)
)

// reportHead is how much of a file IsReport reads: the mark and the legacy
// signatures lie at its start.
const reportHead = 4096

// IsReport reports whether b, the start of an index.html or report.md,
// was written by WriteReport (also by an sgtune from before the mark).
func IsReport(b []byte) bool {
	b = b[:min(len(b), reportHead)]
	return bytes.HasPrefix(b, []byte(reportMark)) || bytes.HasPrefix(b, []byte(doctype+reportMark)) ||
		legacyPage.Match(b) || legacyMarkdown.Match(b)
}

// Foreign returns the files in dir that WriteReport would replace or remove
// but that no earlier report wrote: an index.html or report.md that is not a
// report, or, in a directory that holds no earlier report, files with the
// plots' names. Nil when WriteReport may write there (also when dir does
// not exist). The error says why dir could not be read.
func Foreign(dir string) ([]string, error) {
	var foreign []string
	earlier := false
	for _, name := range []string{"index.html", "report.md"} {
		path := filepath.Join(dir, name)
		ok, err := isReportFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		case ok:
			earlier = true
		default:
			foreign = append(foreign, path)
		}
	}
	if earlier {
		// Its plots are the earlier report's.
		return foreign, nil
	}
	plots, err := filepath.Glob(filepath.Join(dir, "effect-*.svg"))
	if err != nil {
		return nil, err
	}
	for _, n := range []string{plotProgress, plotThroughput, plotTTFT, plotPareto} {
		plots = append(plots, filepath.Join(dir, n))
	}
	for _, p := range plots {
		if _, err := os.Lstat(p); err == nil {
			foreign = append(foreign, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return foreign, nil
}

// isReportFile reads the start of path and says whether WriteReport wrote
// it; a directory or another kind of file is not a report.
func isReportFile(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, reportHead)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return IsReport(head[:n]), nil
}
