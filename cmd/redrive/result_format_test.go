package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestWriteJobResult: jobs show prints a completed job's result on one
// line, or why it cannot be read, and no result line for a job without.
func TestWriteJobResult(t *testing.T) {
	for _, tc := range []struct {
		job  redrive.Job
		want string // a line of the output; "" for no result line
	}{
		{redrive.Job{ID: 1, State: redrive.Completed, Result: json.RawMessage("{\"pages\":\n3}")}, `(?m)^result\s+\{"pages": 3\}$`},
		{redrive.Job{ID: 2, State: redrive.Completed, ResultError: "undecryptable: no key"}, `(?m)^result\s+\(undecryptable: no key\)$`},
		{redrive.Job{ID: 3, State: redrive.Completed}, ""},
	} {
		var out bytes.Buffer
		if err := writeJob(&out, &tc.job); err != nil {
			t.Fatal(err)
		}
		if tc.want == "" {
			if regexp.MustCompile(`(?m)^result`).Match(out.Bytes()) {
				t.Errorf("job %d: a result line in\n%s", tc.job.ID, out.Bytes())
			}
		} else if !regexp.MustCompile(tc.want).Match(out.Bytes()) {
			t.Errorf("job %d: no line matching %s in\n%s", tc.job.ID, tc.want, out.Bytes())
		}
	}
}
