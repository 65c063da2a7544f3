// Package search runs the study loop: samplers, feasibility, parallel GPU groups.
package search
