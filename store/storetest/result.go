package storetest

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testJobResult: Get reads the result a Complete recorded (a job's own,
// not only a workflow dependency's), up to MaxResult bytes as given; a
// completion without one, a retry and an attempt that has not ended
// read none; List and Fetch leave it out.
func testJobResult(x *h) {
	t := x.t
	big := append(append([]byte(`{"pad":"`), bytes.Repeat([]byte("r"), store.MaxResult-10)...), `"}`...)
	if len(big) != store.MaxResult || !json.Valid(big) {
		t.Fatalf("suite bug: a result of %d bytes", len(big))
	}
	jobs := x.leaseNew(at(0), "w",
		store.NewJob{Queue: "res", Kind: "k", MaxRetries: 3},
		store.NewJob{Queue: "res", Kind: "k", MaxRetries: 3},
		store.NewJob{Queue: "res", Kind: "k", MaxRetries: 3},
		store.NewJob{Queue: "res", Kind: "k", MaxRetries: 3},
		store.NewJob{Queue: "res", Kind: "k", MaxRetries: 3})
	for _, j := range jobs {
		if got := x.get(j.ID); got.Result != nil || got.ResultError != "" {
			t.Errorf("running job %d: result %s (%q), want none", j.ID, got.Result, got.ResultError)
		}
	}
	small := raw(`{"rows": 3, "file": "s3://b/k"}`)
	a := completeOf(jobs[0], at(time.Second))
	a.Result = small
	b := completeOf(jobs[1], at(time.Second))
	b.Result = big
	c := completeOf(jobs[2], at(time.Second)) // no result
	d := retryOf(jobs[3], at(time.Second), at(time.Minute), failure.Transient, "boom")
	d.Result = raw(`{"ignored":true}`) // only a Complete keeps one
	e := completeOf(jobs[4], at(time.Second))
	e.Result = raw(`"a string"`)
	x.finish(a, b, c, d, e)

	for _, tc := range []struct {
		id   int64
		want json.RawMessage
	}{{jobs[0].ID, small}, {jobs[1].ID, big}, {jobs[2].ID, nil}, {jobs[3].ID, nil}, {jobs[4].ID, raw(`"a string"`)}} {
		got := x.get(tc.id)
		if got.ResultError != "" {
			t.Errorf("job %d: result error %q", tc.id, got.ResultError)
		}
		switch {
		case tc.want == nil && got.Result != nil:
			t.Errorf("job %d (%s): result %.80s, want none", tc.id, got.State, got.Result)
		case tc.want != nil && !jsonEqual(got.Result, tc.want):
			t.Errorf("job %d: result %.80s (%d bytes), want %.80s (%d bytes)", tc.id, got.Result, len(got.Result), tc.want, len(tc.want))
		}
	}
	// The JSON of a job names it "result" (the API shows the job as the
	// store reads it).
	if enc, err := json.Marshal(x.get(jobs[0].ID)); err != nil || !strings.Contains(string(enc), `"result":{`) {
		t.Errorf("a job with a result encodes as %.200s (%v), want a \"result\" member", enc, err)
	}
	for _, j := range x.listAll(store.Filter{Queue: "res"}, 100) {
		if j.Result != nil {
			t.Errorf("List: job %d carries its result %.40s, want none", j.ID, j.Result)
		}
	}
	// The retried job completes on its next attempt with a result of its
	// own.
	again := x.fetch(store.FetchParams{Queue: "res", Worker: "w", Limit: 10, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour)})
	if len(again) != 1 || again[0].ID != jobs[3].ID {
		t.Fatalf("Fetch after the retry: %v, want job %d", again, jobs[3].ID)
	}
	if again[0].Result != nil {
		t.Errorf("Fetch: job %d carries a result %s", again[0].ID, again[0].Result)
	}
	f := completeOf(again[0], at(time.Hour))
	f.Result = raw(`[1,2,3]`)
	x.finish(f)
	if got := x.get(jobs[3].ID); !jsonEqual(got.Result, raw(`[1,2,3]`)) {
		t.Errorf("completed on its second attempt: result %s, want [1,2,3]", got.Result)
	}
}
