// Package report exports a trial as a launch script and renders study reports.
package report
