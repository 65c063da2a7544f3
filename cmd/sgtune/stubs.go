package main

import "github.com/spf13/cobra"

func (a *app) runCmd() *cobra.Command    { return &cobra.Command{Use: "run STUDY_FILE"} }
func (a *app) statusCmd() *cobra.Command { return &cobra.Command{Use: "status"} }
func (a *app) bestCmd() *cobra.Command   { return &cobra.Command{Use: "best"} }
func (a *app) exportCmd() *cobra.Command { return &cobra.Command{Use: "export"} }
