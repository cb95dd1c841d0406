package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// TestWorkflowsBatchCLI: workflows enqueue of a file of many workflows,
// on SQLite and PostgreSQL, directly and through a server: all enqueued
// at once, a key taken earlier in the file answered by its holder; a
// bad workflow refuses the file, naming it, nothing stored.
func TestWorkflowsBatchCLI(t *testing.T) {
	clearConnEnv(t)
	for mode, setup := range workflowTargets(t) {
		t.Run(mode, func(t *testing.T) {
			tg := setup(t)
			ctx := context.Background()
			cli := func(stdin string, args ...string) (string, string, error) {
				t.Helper()
				return runCLIIn(t, stdin, append(append([]string{}, tg.pre...), args...)...)
			}
			batch := `{"workflows":[` + cliDiamond + `,
				{"name":"pair","jobs":[{"name":"a","kind":"email"},{"name":"b","kind":"email","after":["a"]}]},
				{"idempotency_key":"order-7","jobs":[{"name":"x","kind":"email"}]}]}`
			out, stderr, err := cli(batch, "workflows", "enqueue", "-")
			if err != nil {
				t.Fatalf("enqueue: %v %s", err, stderr)
			}
			if out != "enqueued 2 of 3 workflow(s), 6 job(s); 1 answered by the workflow holding their idempotency key\n" {
				t.Errorf("enqueue: %q", out)
			}
			out, stderr, err = cli(batch, "--json", "workflows", "enqueue", "-")
			if err != nil {
				t.Fatalf("enqueue --json: %v %s", err, stderr)
			}
			got := decode[server.WorkflowBatch](t, out)
			if len(got.Workflows) != 3 || !got.Workflows[0].Existing || got.Workflows[1].Existing || got.Workflows[2].ID != got.Workflows[0].ID {
				t.Errorf("enqueue --json: %+v", got)
			}
			before, err := tg.st.Count(ctx, store.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ body, says string }{
				{`{"workflows":[{"jobs":[{"name":"a","kind":"email"}]},{"jobs":[{"name":"a","kind":"k","after":["b"]},{"name":"b","kind":"k","after":["a"]}]}]}`,
					"workflow 1: the jobs' dependencies form a cycle: a -> b -> a (field workflows[1].jobs)"},
				{`{"workflows":[]}`, "at least one workflow (field workflows)"},
				{`{"workflows":[{"jobs":[{"name":"a","kind":"email"}]}],"jobs":[]}`, `"jobs"`},
			} {
				_, _, err := cli(c.body, "workflows", "enqueue", "-")
				if err == nil || !strings.Contains(err.Error(), c.says) || !strings.HasPrefix(err.Error(), "standard input: ") {
					t.Errorf("enqueue of %s: %v, want it refused saying %q", c.body, err, c.says)
				}
			}
			if n, err := tg.st.Count(ctx, store.Filter{}); err != nil || n != before {
				t.Errorf("refused files stored %d jobs (%v)", n-before, err)
			}
		})
	}
}
