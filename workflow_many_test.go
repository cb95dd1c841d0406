package redrive_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestEnqueueWorkflowsRefused: a request of one workflow that Enqueue
// would refuse refuses the whole EnqueueWorkflows with a
// *WorkflowBatchError naming that workflow (its index and name), as
// does a nil workflow; nothing is stored.
func TestEnqueueWorkflowsRefused(t *testing.T) {
	ctx := context.Background()
	c, _, done := exampleClient(ctx)
	defer done()
	good := func() *redrive.Workflow {
		return redrive.NewWorkflow("good").Add("a", redrive.Request{Kind: "k"})
	}
	for _, tc := range []struct {
		name string
		bad  *redrive.Workflow
		want string
	}{
		{"no kind", redrive.NewWorkflow("bad").Add("a", redrive.Request{}), "bad"},
		{"return existing", redrive.NewWorkflow("bad").Add("a", redrive.Request{Kind: "k", IdempotencyKey: "x", ReturnExisting: true}), "bad"},
		{"bad callback", redrive.NewWorkflow("bad").Add("a", redrive.Request{Kind: "k"}).OnSuccess(redrive.Request{Kind: "k", Payload: func() {}}), "bad"},
		{"nil", nil, ""},
	} {
		_, err := c.EnqueueWorkflows(ctx, []*redrive.Workflow{good(), good(), tc.bad, good()})
		be, ok := errors.AsType[*redrive.WorkflowBatchError](err)
		if !ok || be.Index != 2 || be.Name != tc.want || !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("%s: %v, want a *WorkflowBatchError (ErrInvalid) naming workflow 2 %q", tc.name, err, tc.want)
		}
	}
	if n, err := c.Count(ctx, redrive.Filter{}); err != nil || n != 0 {
		t.Errorf("refused calls stored %d jobs (%v)", n, err)
	}
	if _, err := c.EnqueueWorkflows(ctx, nil); !errors.Is(err, redrive.ErrInvalid) {
		t.Errorf("no workflows: %v, want ErrInvalid", err)
	}
}
