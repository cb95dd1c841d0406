package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/store"
)

// TestTraceStoredForm: a trace context with a packed form is stored in
// trace_packed (25 bytes and its tracestate) and trace is NULL, one
// without in trace as its text, by every enqueue path (one job, a keyed
// batch, a batch written with COPY) and AddDead; a row written before
// migration 0037 (its text in trace) reads as it did; a packed form that
// does not unpack reads as no context, counted in tracectx.Malformed, and
// stays in the row.
func TestTraceStoredForm(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	traceOf := func(i int) string {
		switch i % 3 {
		case 0:
			return fmt.Sprintf("00-%032x-b7ad6b7169203331-01", i+1)
		case 1:
			return fmt.Sprintf("00-%032x-b7ad6b7169203331-00 rojo=%d", i+1, i)
		}
		return fmt.Sprintf("00-%032X-B7AD6B7169203331-00", i+1) // no packed form
	}
	want := map[int64]string{}
	add := func(jobs []*store.Job, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			want[j.ID] = j.Trace
		}
	}
	now := time.Unix(1700000000, 0).UTC()
	var copyBatch, keyed []store.NewJob
	for i := range 250 {
		copyBatch = append(copyBatch, store.NewJob{Queue: "q", Kind: "k", Trace: traceOf(i)})
	}
	for i := range 3 {
		keyed = append(keyed, store.NewJob{Queue: "q", Kind: "k", Trace: traceOf(i), IdempotencyKey: fmt.Sprint("key", i)})
	}
	add(s.Enqueue(ctx, copyBatch, now))
	add(s.Enqueue(ctx, keyed, now))
	for i := range 3 {
		add(s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Trace: traceOf(i)}}, now))
	}
	add(s.AddDead(ctx, []store.DeadJob{{Queue: "dq", Kind: "k", DeadAt: now, Trace: tp}, {Queue: "dq", Kind: "k", DeadAt: now, Trace: traceOf(2)}}, now))
	if len(want) != 250+3+3+2 {
		t.Fatalf("%d jobs, want %d", len(want), 258)
	}
	for id, tc := range want {
		var text *string
		var packed []byte
		if err := s.Pool().QueryRow(ctx, `SELECT trace, trace_packed FROM `+s.Schema()+`.jobs WHERE id = $1`, id).Scan(&text, &packed); err != nil {
			t.Fatal(err)
		}
		if tracectx.Packable(tc) {
			if p, _ := tracectx.AppendPacked(nil, tc); text != nil || string(packed) != string(p) {
				t.Errorf("job %d (%q): trace %v, trace_packed %x; want NULL, %x", id, tc, text, packed, p)
			}
		} else if text == nil || *text != tc || packed != nil {
			t.Errorf("job %d (%q): trace %v, trace_packed %x; want its text, NULL", id, tc, text, packed)
		}
	}
	// Two rows as written before 0037, one packed form that is corrupt.
	var ids []int64
	for id := range want {
		ids = append(ids, id)
	}
	old1, old2, bad := ids[0], ids[1], ids[2]
	for _, id := range []int64{old1, old2} {
		want[id] = tp
		if _, err := s.Pool().Exec(ctx, `UPDATE `+s.Schema()+`.jobs SET trace = $1, trace_packed = NULL WHERE id = $2`, tp, id); err != nil {
			t.Fatal(err)
		}
	}
	want[bad] = ""
	if _, err := s.Pool().Exec(ctx, `UPDATE `+s.Schema()+`.jobs SET trace = NULL, trace_packed = '\x0102' WHERE id = $1`, bad); err != nil {
		t.Fatal(err)
	}
	before := tracectx.Malformed.Load()
	for id, tc := range want {
		j, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Trace != tc {
			t.Errorf("Get(%d).Trace = %q, want %q", id, j.Trace, tc)
		}
	}
	leased, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 1000, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(leased) != len(want)-2 {
		t.Fatalf("Fetch leased %d jobs, want %d", len(leased), len(want)-2)
	}
	for _, j := range leased {
		if j.Trace != want[j.ID] {
			t.Errorf("Fetch: job %d Trace = %q, want %q", j.ID, j.Trace, want[j.ID])
		}
	}
	if got := tracectx.Malformed.Load() - before; got < 1 {
		t.Errorf("Malformed counted %d, want the corrupt context's reads", got)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT length(trace_packed) FROM `+s.Schema()+`.jobs WHERE id = $1`, bad).Scan(&n); err != nil || n != 2 {
		t.Errorf("the corrupt context: %d bytes (%v), want the 2 kept", n, err)
	}
}
