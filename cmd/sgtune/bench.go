package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// benchCmd is `sgtune bench --url URL ...`: benchmark a running server.
func (a *app) benchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "Benchmark a running OpenAI-compatible server",
		RunE:  func(cmd *cobra.Command, args []string) error { return errors.New("bench: not implemented") },
	}
}
