package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/server"
)

// newTokenCmd is `redrive token`: making the named tokens of serve's API.
func newTokenCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make API tokens with a role (read, operate, admin)",
	}
	cmd.AddCommand(newTokenNewCmd(g))
	return cmd
}

// tokenNew is what `redrive token new` prints with --json.
type tokenNew struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	Token  string `json:"token"`
	SHA256 string `json:"sha256"`
	// Config is the entry of serve's config file "tokens" object.
	Config string `json:"config"`
	// Env is the item of $REDRIVE_TOKENS (or --tokens).
	Env string `json:"env"`
}

func newTokenNewCmd(g *globalOptions) *cobra.Command {
	var role, name string
	cmd := &cobra.Command{
		Use:   "new --role read|worker|operate|admin --name NAME",
		Short: "Print a new random token and the line that configures it in serve",
		Long: `Print a new random token (256 bits, after the prefix rdt_) and how to give it
to serve: an entry of the config file's "tokens" object, or an item of
$REDRIVE_TOKENS (comma-separated). serve keeps only the token's SHA-256:
give the token itself to whoever will use it, and keep it nowhere else.

The roles: read sees everything the API and the dashboard show and changes
nothing; worker adds the worker protocol (/v1/worker/..., for worker
processes in other languages: it hands over payloads whole, secrets
included); operate adds enqueue, cancel, redrive, run now, priority, pause
and resume, breakers and limits, but not the worker protocol; admin adds
everything: payload edits, purge, export, replay, schedules, the worker
protocol and secrets in clear. See docs/security.md.

Nothing is written to the store: serve takes the token once its
configuration has it (restart serve).

  redrive token new --role read --name alice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := server.ParseRole(role)
			if err != nil {
				return flagErrorf(cmd, "--role: %w", err)
			}
			if err := server.CheckTokenName(name); err != nil {
				return flagErrorf(cmd, "--name: %w", err)
			}
			if name == server.LegacyTokenName {
				return flagErrorf(cmd, "--name: %q is the name of --token's token: choose another", name)
			}
			secret, sum, err := server.NewToken()
			if err != nil {
				return err
			}
			hash := hex.EncodeToString(sum[:])
			entry, _ := json.Marshal(map[string]string{"role": r.String(), "sha256": hash})
			key, _ := json.Marshal(name)
			out := tokenNew{Name: name, Role: r.String(), Token: secret, SHA256: hash,
				Config: string(key) + ": " + string(entry), Env: name + ":" + r.String() + ":" + hash}
			w := cmd.OutOrStdout()
			if g.JSON {
				return json.NewEncoder(w).Encode(out)
			}
			fmt.Fprintf(w, "token: %s\n\n", out.Token)
			fmt.Fprintf(w, "Give the token to %s; serve keeps only its SHA-256. Configure it in serve's\n", name)
			fmt.Fprintf(w, "config file, in its \"tokens\" object:\n\n  \"tokens\": {%s}\n\n", out.Config)
			fmt.Fprintf(w, "or in the environment (items separated by commas):\n\n  REDRIVE_TOKENS=%s\n", out.Env)
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "the token's role: read, worker, operate or admin")
	cmd.Flags().StringVar(&name, "name", "", "the token's name (letters, digits, _ and -), shown in the dashboard and the audit log")
	_ = cmd.MarkFlagRequired("role")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}
