package store

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

// TestWorkflowErrorUnknownEscaped: a dependency naming no job is quoted
// by the error as it is, whatever it holds: a name is checked only once
// it names a job, so an unknown one may carry control characters (a
// terminal's escapes, a line break that forges a log line) or " -> ",
// which would make "job -> name" ambiguous. The error's text must show
// such a name escaped, and keep a plain one as it is.
func TestWorkflowErrorUnknownEscaped(t *testing.T) {
	for _, tc := range []struct {
		after, want string
	}{
		{"X", "a -> X"},
		{"x\x1b[2J\nlevel=error msg=forged", `a -> "x\x1b[2J\nlevel=error msg=forged"`},
		{"b -> c", `a -> "b -> c"`},
		{" pad", `a -> " pad"`},
		{"\xff", `a -> "\xff"`},
		{"", `a -> ""`},
	} {
		w := NewWorkflow{Jobs: []WorkflowNode{{Name: "a", Job: NewJob{Queue: "q", Kind: "k"}, After: []string{tc.after}}}}
		_, err := CheckWorkflow(&w)
		we, ok := IsWorkflowError(err)
		if !ok || !errors.Is(err, ErrInvalid) {
			t.Fatalf("after %q: %v, want a *WorkflowError", tc.after, err)
		}
		if len(we.Unknown) != 1 || we.Unknown[0] != tc.want {
			t.Errorf("after %q: Unknown %q, want [%q]", tc.after, we.Unknown, tc.want)
		}
		if msg := err.Error(); strings.ContainsFunc(msg, unicode.IsControl) || !strings.Contains(msg, tc.want) {
			t.Errorf("after %q: error %q holds a control character or does not name %q", tc.after, msg, tc.want)
		}
	}
	// A job's own name may hold " -> ": quoted, the reference reads one
	// way, and UnknownJobs names the job as it is.
	w := NewWorkflow{Jobs: []WorkflowNode{{Name: "p -> q", Job: NewJob{Queue: "q", Kind: "k"}, After: []string{"X"}}}}
	_, err := CheckWorkflow(&w)
	if we, ok := IsWorkflowError(err); !ok || len(we.Unknown) != 1 || we.Unknown[0] != `"p -> q" -> X` || we.UnknownJobs[0] != "p -> q" {
		t.Errorf("job %q after X: %v, want the reference %q", "p -> q", err, `"p -> q" -> X`)
	}
}
