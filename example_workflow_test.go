package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
)

// A diamond workflow: extract, then transform and index side by side,
// then publish. Index fails for good and goes to the DLQ; under the
// default policy (WaitOnDead) publish waits, blocked, without using an
// attempt. The operator fixes index's payload and redrives it: it
// completes, publish runs and reads what its dependencies recorded, and
// the success callback fires, once.
func ExampleNewWorkflow() {
	ctx := context.Background()
	client, quiet, done := exampleClient(ctx) // a SQLite store in a temporary folder
	defer done()
	worker := redrive.NewWorker(client, redrive.WorkerOptions{Logger: quiet, PollInterval: 10 * time.Millisecond})

	type Step struct{ Shard string }
	for _, kind := range []string{"extract", "transform"} {
		redrive.Handle(worker, kind, func(ctx context.Context, job *redrive.Job, s Step) error {
			return redrive.SetResult(ctx, map[string]string{"by": job.Kind})
		})
	}
	redrive.Handle(worker, "index", func(ctx context.Context, job *redrive.Job, s Step) error {
		if s.Shard == "" {
			return &failure.Error{Class: failure.Permanent, Err: fmt.Errorf("no shard")}
		}
		return redrive.SetResult(ctx, map[string]string{"by": "index", "shard": s.Shard})
	})
	redrive.Handle(worker, "publish", func(ctx context.Context, job *redrive.Job, s Step) error {
		deps, err := client.DependencyResults(ctx, job.ID)
		if err != nil {
			return err
		}
		for _, d := range deps {
			fmt.Printf("publish reads %s: %s\n", d.Name, d.Result)
		}
		return nil
	})
	succeeded := make(chan struct{})
	redrive.Handle(worker, "notify", func(ctx context.Context, job *redrive.Job, s Step) error {
		close(succeeded) // a second run would panic
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { worker.Run(runCtx); close(stopped) }()

	wf := redrive.NewWorkflow("nightly").
		Add("extract", redrive.Request{Kind: "extract", Payload: Step{}}).
		Add("transform", redrive.Request{Kind: "transform", Payload: Step{}}, "extract").
		Add("index", redrive.Request{Kind: "index", Payload: Step{}}, "extract").
		Add("publish", redrive.Request{Kind: "publish", Payload: Step{}}, "transform", "index").
		OnSuccess(redrive.Request{Kind: "notify", Payload: Step{}})
	w, err := client.EnqueueWorkflow(ctx, wf)
	if err != nil {
		panic(err)
	}
	id := map[string]int64{}
	for _, j := range w.Jobs {
		id[j.Name] = j.JobID
	}
	waitFor(client, id["index"], redrive.Dead)
	waitFor(client, id["transform"], redrive.Completed)
	w, _ = client.GetWorkflow(ctx, w.ID)
	fmt.Println("workflow", w.State, "dead:", w.Counts[redrive.Dead], "blocked:", w.Counts["blocked"])

	fixed, _ := json.Marshal(Step{Shard: "eu-1"})
	client.Redrive(ctx, redrive.RedriveRequest{IDs: []int64{id["index"]}, Payload: json.RawMessage(fixed), Note: "shard set"})
	<-succeeded
	w, _ = client.GetWorkflow(ctx, w.ID)
	fmt.Println("workflow", w.State)

	stop()
	<-stopped
	// Output:
	// workflow active dead: 1 blocked: 1
	// publish reads transform: {"by":"transform"}
	// publish reads index: {"by":"index","shard":"eu-1"}
	// workflow succeeded
}

// A cycle, or a dependency on a job the workflow does not have, is
// refused with an error naming it.
func ExampleClient_EnqueueWorkflow_cycle() {
	ctx := context.Background()
	client, _, done := exampleClient(ctx)
	defer done()
	wf := redrive.NewWorkflow("bad").
		Add("a", redrive.Request{Kind: "k"}, "c").
		Add("b", redrive.Request{Kind: "k"}, "a").
		Add("c", redrive.Request{Kind: "k"}, "b")
	_, err := client.EnqueueWorkflow(ctx, wf)
	fmt.Println(err)
	// Output:
	// redrive: enqueue workflow: sqlite: enqueue workflow: invalid workflow: dependency cycle: a -> b -> c -> a
}

// A batch grows while it is open: a job added after its enqueue may
// depend on its members, and its callbacks wait for the jobs added. Once
// every job finished (its complete callback fired), it takes no more.
func ExampleClient_AddToWorkflow() {
	ctx := context.Background()
	client, _, done := exampleClient(ctx)
	defer done()
	wf := redrive.NewWorkflow("import").
		Add("page-1", redrive.Request{Kind: "fetch"}).
		OnComplete(redrive.Request{Kind: "report"})
	w, err := client.EnqueueWorkflow(ctx, wf)
	if err != nil {
		panic(err)
	}
	// page-1 found a second page, and a merge of both.
	w, err = client.AddToWorkflow(ctx, w.ID, redrive.NewWorkflow("").
		Add("page-2", redrive.Request{Kind: "fetch"}).
		Add("merge", redrive.Request{Kind: "merge"}, "page-1", "page-2"))
	if err != nil {
		panic(err)
	}
	for _, j := range w.Jobs {
		fmt.Println(j.Name, j.State, len(j.After))
	}
	fmt.Println("total", w.Total)

	_, err = client.AddToWorkflow(ctx, w.ID, redrive.NewWorkflow("").Add("page-3", redrive.Request{Kind: "fetch"}, "page-9"))
	fmt.Println(err)
	_, _ = client.CancelWorkflow(ctx, w.ID)
	_, err = client.AddToWorkflow(ctx, w.ID, redrive.NewWorkflow("").Add("page-3", redrive.Request{Kind: "fetch"}))
	fmt.Println(errors.Is(err, redrive.ErrConflict), err)
	// Output:
	// page-1 pending 0
	// page-2 pending 0
	// merge blocked 2
	// total 3
	// redrive: add to workflow 1: sqlite: add to workflow 1: invalid workflow: unknown dependencies: page-3 -> page-9
	// true redrive: add to workflow 1: sqlite: add to workflow 1: workflow 1 is canceled (state canceled): it takes no more jobs
}

// Many workflows enqueued by one call, in one transaction: an order's
// charge then its shipping, for three orders. Each workflow has its
// own idempotency key: the call answers the third, whose key the first
// holds, with the first (Existing set). A workflow the store refuses
// refuses the call, the error naming it.
func ExampleClient_EnqueueWorkflows() {
	ctx := context.Background()
	client, _, done := exampleClient(ctx) // a SQLite store in a temporary folder
	defer done()

	type Order struct{ ID int }
	order := func(id int) *redrive.Workflow {
		return redrive.NewWorkflow(fmt.Sprint("order ", id)).Key(fmt.Sprint("order-", id)).
			Add("charge", redrive.Request{Kind: "charge", Payload: Order{id}}).
			Add("ship", redrive.Request{Kind: "ship", Payload: Order{id}}, "charge")
	}
	ws, err := client.EnqueueWorkflows(ctx, []*redrive.Workflow{order(1042), order(1043), order(1042)})
	if err != nil {
		panic(err)
	}
	for _, w := range ws {
		fmt.Printf("%s: %d jobs, existing %v, same as the first %v\n", w.Name, w.Total, w.Existing, w.ID == ws[0].ID)
	}

	bad := redrive.NewWorkflow("loop").
		Add("a", redrive.Request{Kind: "charge"}, "b").
		Add("b", redrive.Request{Kind: "ship"}, "a")
	_, err = client.EnqueueWorkflows(ctx, []*redrive.Workflow{order(1044), bad})
	var be *redrive.WorkflowBatchError
	if errors.As(err, &be) && errors.Is(err, redrive.ErrInvalid) {
		fmt.Println("refused because of workflow", be.Index, be.Name)
	}
	n, _ := client.Count(ctx, redrive.Filter{Kind: "charge"})
	fmt.Println("charges enqueued:", n)
	// Output:
	// order 1042: 2 jobs, existing false, same as the first true
	// order 1043: 2 jobs, existing false, same as the first false
	// order 1042: 2 jobs, existing true, same as the first true
	// refused because of workflow 1 loop
	// charges enqueued: 2
}
