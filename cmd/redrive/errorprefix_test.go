package main

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestErrorPrefixFlag: dlq ls, jobs ls and dlq groups take
// --error-prefix (the start of the last error, case-sensitive),
// identically directly and through a server; text no store can compare
// is refused with an error, and the operations do not take the flag.
func TestErrorPrefixFlag(t *testing.T) {
	clearConnEnv(t)
	for mode, setup := range countModes(t) {
		t.Run(mode, func(t *testing.T) {
			target, db := setup(t)
			st, err := sqlite.Open(t.Context(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			var ds []store.DeadJob
			for i, e := range []string{"bad address 1", "bad address 2", "Bad gateway", "timeout", "bad"} {
				ds = append(ds, store.DeadJob{Queue: "mail", Kind: "email", Payload: []byte(`{}`), MaxRetries: -1,
					DeadAt: now.Add(time.Duration(i) * time.Second), DeadReason: "permanent_error", LastError: e,
					LastErrorClass: failure.Permanent, Fingerprint: "fp-" + strings.Fields(e)[0]})
			}
			jobs, err := st.AddDead(context.Background(), ds, now)
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			cli := func(args ...string) string {
				t.Helper()
				return mustCLI(t, append(slices.Clone(target), args...)...)
			}
			for _, c := range []struct {
				prefix string
				want   []int64 // newest first
			}{
				{"bad address", []int64{jobs[1].ID, jobs[0].ID}},
				{"bad", []int64{jobs[4].ID, jobs[1].ID, jobs[0].ID}},
				{"Bad", []int64{jobs[2].ID}},
				{"bad address 10", nil},
			} {
				for _, cmd := range [][]string{{"dlq", "ls"}, {"jobs", "ls"}} {
					res := decode[redrive.ListResult](t, cli(append([]string{"--json"}, append(cmd, "--error-prefix", c.prefix, "--limit", "2")...)...))
					var got []int64
					for _, j := range res.Jobs {
						got = append(got, j.ID)
					}
					if want := c.want[:min(2, len(c.want))]; !slices.Equal(got, want) {
						t.Errorf("%v --error-prefix %q: jobs %v, want %v", cmd, c.prefix, got, want)
					}
				}
				gs := decode[struct{ Groups []redrive.Group }](t, cli("--json", "dlq", "groups", "--error-prefix", c.prefix)).Groups
				var n int64
				for _, g := range gs {
					n += g.Count
				}
				if n != int64(len(c.want)) {
					t.Errorf("dlq groups --error-prefix %q: %+v, want %d jobs in all", c.prefix, gs, len(c.want))
				}
			}
			// A listing of more than one page says how many match.
			out := cli("dlq", "ls", "--error-prefix", "bad", "--limit", "1")
			wantIn(t, out, "showing 1 of 3 dead jobs")
			_, _, err = runCLIIn(t, "", append(slices.Clone(target), "dlq", "ls", "--error-prefix", "bad \xff")...)
			if err == nil || !strings.Contains(err.Error(), "UTF-8") {
				t.Errorf("dlq ls --error-prefix of invalid UTF-8: %v", err)
			}
			if _, _, err := runCLIIn(t, "", append(slices.Clone(target), "dlq", "purge", "--error-prefix", "bad")...); err == nil ||
				!strings.Contains(err.Error(), "unknown flag") {
				t.Errorf("dlq purge --error-prefix: %v, want an unknown flag", err)
			}
		})
	}
}
