package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// checkCmd is `sgtune check STUDY_FILE [--json]`.
func (a *app) checkCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check STUDY_FILE",
		Short: "Validate a study file and explain which configs would be rejected; launches nothing",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return errors.New("check: not implemented") },
	}
}
