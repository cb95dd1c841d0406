package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// readBuildInfo is debug.ReadBuildInfo, replaced by tests.
var readBuildInfo = debug.ReadBuildInfo

// versionString is the module version of the binary, then the VCS commit
// and time it was built from when known: "v1.2.0 (commit 0123abcd4567,
// 2026-11-25T11:47:35Z)". A binary built in a work tree is "(devel)"; one
// with uncommitted changes says "modified".
func versionString() string {
	bi, ok := readBuildInfo()
	if !ok {
		return "(devel), no build information"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var parts []string
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		parts = append(parts, "commit "+rev)
	}
	if at != "" {
		parts = append(parts, at)
	}
	if modified {
		parts = append(parts, "modified")
	}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	if len(parts) > 0 {
		v += " (" + strings.Join(parts, ", ") + ")"
	}
	return v
}

// newVersionCmd is `redrive version`, the same as `redrive --version`.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of redrive: module version, VCS commit and time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "redrive %s\n", versionString())
			return err
		},
	}
}
