// Package storage keeps studies, trials, sweep points and logs in SQL
// (SQLite by default). Store implements goptuna.Storage.
package storage

import (
	"errors"
	"time"

	"github.com/sgtune/sgtune/objective"
)

// Store is a goptuna.Storage on database/sql with sgtune's own tables.
type Store struct{}

// Open opens (creating and migrating if needed) the database at path.
func Open(path string) (*Store, error) { return nil, errors.New("storage.Open: not implemented") }

// Close closes the database.
func (s *Store) Close() error { return nil }

// SavePoints stores the measured points of a trial.
func (s *Store) SavePoints(trialID int, pts []objective.Point) error { return nil }

// Points returns the stored points of a trial in measurement order.
func (s *Store) Points(trialID int) ([]objective.Point, error) { return nil, nil }

// Heartbeat records that the trial's owner is alive.
func (s *Store) Heartbeat(trialID int) error { return nil }

// StaleRunning lists RUNNING trials of a study whose heartbeat is older than d.
func (s *Store) StaleRunning(studyID int, d time.Duration) ([]int, error) { return nil, nil }
