package storetest

import (
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testGetNotFound: Get of a missing id wraps ErrNotFound.
func testGetNotFound(x *h) {
	j := x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k"})[0]
	for _, id := range []int64{missingID, j.ID + 1000, 0, -1} {
		x.notFound(id)
	}
}

// testListFilters: every filter field, alone and combined, with the order
// of the listing, on a fixture holding a job in every state.
func testListFilters(x *h) {
	// Fixture, in id order (A first). Reference times in brackets.
	dead := func(now time.Time, queue, kind string, deadAt time.Time, class failure.Class, reason, fp, msg string) int64 {
		return x.makeDead(now, deadSpec{job: store.NewJob{Queue: queue, Kind: kind}, deadAt: deadAt, class: class, reason: reason, fp: fp, err: msg})[0]
	}
	A := dead(at(0), "lq", "k2", at(20*time.Minute), failure.Permanent, "http_404", "fpA", "Not Found: /x")                       // dead [20m]
	B := dead(at(0), "lq2", "k1", at(5*time.Minute), failure.Transient, "retries_exhausted", "fpB", "connection REFUSED by peer") // dead [5m]
	C := dead(at(time.Minute), "lq", "k1", at(15*time.Minute), failure.NeedsAuth, "needs_auth", "fpC", "rate 100% used")          // dead [15m]
	D := dead(at(2*time.Minute), "lq", "k1", at(25*time.Minute), failure.Permanent, "http_404", "fpA", "rate 1000 used")          // dead [25m]
	e := x.leaseNew(at(3*time.Minute), "w", store.NewJob{Queue: "lq", Kind: "k1"})[0]
	x.finish(completeOf(e, at(10*time.Minute)))
	E := e.ID                                                                                                // completed [10m]
	F := x.enqueue(at(4*time.Minute), store.NewJob{Queue: "lq", Kind: "k1", RunAt: at(3 * time.Hour)})[0].ID // canceled [30m]
	x.cancel(F, at(30*time.Minute))
	g := x.leaseNew(at(5*time.Minute), "w", store.NewJob{Queue: "lq", Kind: "k1"})[0]
	x.finish(retryOf(g, at(6*time.Minute), at(2*time.Hour), failure.Transient, "Timeout talking to DB"))
	G := g.ID                                                                                            // scheduled after a retry [5m]
	H := x.leaseNew(at(6*time.Minute), "w", store.NewJob{Queue: "lq", Kind: "k1"})[0].ID                 // running [6m]
	I := x.enqueue(at(7*time.Minute), store.NewJob{Queue: "lq", Kind: "k2", RunAt: at(time.Hour)})[0].ID // scheduled [7m]
	J := x.enqueue(at(8*time.Minute), store.NewJob{Queue: "lq", Kind: "k1"})[0].ID                       // pending [8m]

	ids := []int64{A, B, C, D, E, F, G, H, I, J}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			x.t.Fatalf("fixture ids %v are not increasing", ids)
		}
	}
	wantStates := map[int64]store.State{A: store.Dead, B: store.Dead, C: store.Dead, D: store.Dead, E: store.Completed, F: store.Canceled, G: store.Scheduled, H: store.Running, I: store.Scheduled, J: store.Pending}
	for id, st := range wantStates {
		if g := x.get(id); g.State != st {
			x.t.Fatalf("fixture job %d is %s, want %s", id, g.State, st)
		}
	}

	cases := []struct {
		name string
		f    store.Filter
		want []int64
	}{
		{"everything", store.Filter{}, []int64{J, I, H, G, F, E, D, C, B, A}},
		{"pending", store.Filter{States: []store.State{store.Pending}}, []int64{J}},
		{"scheduled", store.Filter{States: []store.State{store.Scheduled}}, []int64{I, G}},
		{"running", store.Filter{States: []store.State{store.Running}}, []int64{H}},
		{"pending or scheduled", store.Filter{States: []store.State{store.Pending, store.Scheduled}}, []int64{J, I, G}},
		{"completed or canceled", store.Filter{States: []store.State{store.Completed, store.Canceled}}, []int64{F, E}},
		{"dead, by dead_at", store.Filter{States: []store.State{store.Dead}}, []int64{D, A, C, B}},
		{"dead or completed, by id", store.Filter{States: []store.State{store.Dead, store.Completed}}, []int64{E, D, C, B, A}},
		{"queue", store.Filter{Queue: "lq2"}, []int64{B}},
		{"unknown queue", store.Filter{Queue: "nope"}, nil},
		{"kind", store.Filter{Kind: "k2"}, []int64{I, A}},
		{"class transient", store.Filter{Class: "transient"}, []int64{G, B}},
		{"class permanent", store.Filter{Class: "permanent"}, []int64{D, A}},
		{"class needs_auth", store.Filter{Class: "needs_auth"}, []int64{C}},
		{"reason", store.Filter{Reason: "http_404"}, []int64{D, A}},
		{"fingerprint", store.Filter{Fingerprint: "fpA"}, []int64{D, A}},
		{"error, other case", store.Filter{ErrorContains: "refused"}, []int64{B}},
		{"error, upper case", store.Filter{ErrorContains: "TIMEOUT talking"}, []int64{G}},
		{"error, substring of two", store.Filter{ErrorContains: "rate 1"}, []int64{D, C}},
		{"error with %, literal", store.Filter{ErrorContains: "100%"}, []int64{C}},
		{"error with _, literal", store.Filter{ErrorContains: "rate_1"}, nil},
		{"ids", store.Filter{IDs: []int64{A, E, J, missingID}}, []int64{J, E, A}},
		{"since/until on reference times", store.Filter{Since: at(10 * time.Minute), Until: at(25 * time.Minute)}, []int64{E, C, A}},
		{"since/until on created_at", store.Filter{Since: at(5 * time.Minute), Until: at(8 * time.Minute)}, []int64{I, H, G, B}},
		{"since only", store.Filter{Since: at(25 * time.Minute)}, []int64{F, D}},
		{"until only", store.Filter{Until: at(6 * time.Minute)}, []int64{G, B}},
		{"since in another zone", store.Filter{Since: at(25 * time.Minute).In(time.FixedZone("UTC-8", -8*3600))}, []int64{F, D}},
		{"dead in queue", store.Filter{States: []store.State{store.Dead}, Queue: "lq"}, []int64{D, A, C}},
		{"dead in queue and kind", store.Filter{States: []store.State{store.Dead}, Queue: "lq", Kind: "k1"}, []int64{D, C}},
		{"scheduled and transient", store.Filter{States: []store.State{store.Scheduled}, Class: "transient"}, []int64{G}},
		{"dead since", store.Filter{States: []store.State{store.Dead}, Since: at(15 * time.Minute)}, []int64{D, A, C}},
		{"ids and state", store.Filter{IDs: []int64{A, E, J}, States: []store.State{store.Dead}}, []int64{A}},
	}
	for _, c := range cases {
		for _, size := range []int{store.MaxPageSize, 3, 1} {
			x.checkIDs(fmt.Sprintf("List %s (%+v), pages of %d", c.name, c.f, size), x.listIDs(c.f, size), c.want)
		}
	}
}

// testListPagination: keyset pages over 100 jobs, newest first; jobs
// inserted during the walk do not disturb it.
func testListPagination(x *h) {
	var jobs []store.NewJob
	for i := range 100 {
		jobs = append(jobs, store.NewJob{Queue: "pg", Kind: "k", Payload: raw(fmt.Sprintf(`{"i":%d}`, i))})
		if i%20 == 0 {
			jobs = append(jobs, store.NewJob{Queue: "other", Kind: "k"})
		}
	}
	var want []int64 // newest first
	for _, j := range x.enqueue(at(0), jobs...) {
		if j.Queue == "pg" {
			want = append([]int64{j.ID}, want...)
		}
	}
	f := store.Filter{Queue: "pg"}

	// Pages of 7: 14 full pages and one of 2, Next empty only on the last.
	var got []int64
	cursor := ""
	for page := 0; page < 15; page++ {
		res := x.list(f, store.Page{Cursor: cursor, Limit: 7})
		wantLen, last := 7, page == 14
		if last {
			wantLen = 2
		}
		if len(res.Jobs) != wantLen || (res.Next == "") != last {
			x.t.Fatalf("page %d of 7: %d jobs, Next %q; want %d jobs and Next empty=%v", page, len(res.Jobs), res.Next, wantLen, last)
		}
		got = append(got, jobIDs(res.Jobs)...)
		cursor = res.Next
	}
	x.checkIDs("pages of 7", got, want)

	// Pages of 10: the tenth page is the last and says so.
	x.checkIDs("pages of 10", x.listIDs(f, 10), want)
	cursor = ""
	for page := 0; page < 10; page++ {
		res := x.list(f, store.Page{Cursor: cursor, Limit: 10})
		if page == 9 && res.Next != "" {
			x.t.Errorf("page 10 of 10 (the last) has Next %q, want empty", res.Next)
		}
		cursor = res.Next
	}

	// Limit 0 is the default page size.
	if res := x.list(f, store.Page{}); len(res.Jobs) != store.DefaultPageSize || res.Next == "" {
		x.t.Errorf("List with Limit 0: %d jobs, Next %q; want %d jobs and a Next cursor", len(res.Jobs), res.Next, store.DefaultPageSize)
	} else {
		x.checkIDs("List with Limit 0", jobIDs(res.Jobs), want[:store.DefaultPageSize])
	}

	// Jobs inserted after the first page do not show up in later pages, and
	// no original job is lost or repeated.
	first := x.list(f, store.Page{Limit: 7})
	got = jobIDs(first.Jobs)
	var more []store.NewJob
	for range 10 {
		more = append(more, store.NewJob{Queue: "pg", Kind: "k"})
	}
	x.enqueue(at(time.Minute), more...)
	for cursor = first.Next; cursor != ""; {
		res := x.list(f, store.Page{Cursor: cursor, Limit: 7})
		got = append(got, jobIDs(res.Jobs)...)
		cursor = res.Next
		if len(got) > 200 {
			x.t.Fatalf("pagination does not end")
		}
	}
	x.checkIDs("pages of 7 with inserts after the first page", got, want)
}

// testListPaginationDead: a dead-only listing pages by dead_at descending,
// then id descending, through ties of dead_at.
func testListPaginationDead(x *h) {
	var specs []deadSpec
	for i := range 30 {
		specs = append(specs, deadSpec{
			job:    store.NewJob{Queue: "pd", Kind: "k"},
			deadAt: at(time.Duration(i*7%5) * time.Minute), // five dead_at values, six jobs each, not in id order
			class:  failure.Permanent, reason: "r", fp: "f", err: "e",
		})
	}
	deadIDs := x.makeDead(at(0), specs...)
	var recs []deadRec
	for i, id := range deadIDs {
		recs = append(recs, deadRec{id: id, deadAt: specs[i].deadAt})
	}
	// Non-dead jobs in the same queue are not listed.
	done := x.leaseNew(at(time.Second), "w", store.NewJob{Queue: "pd", Kind: "k"}, store.NewJob{Queue: "pd", Kind: "k"})
	x.finish(completeOf(done[0], at(time.Hour)), completeOf(done[1], at(time.Hour)))

	want := deadOrder(recs)
	f := store.Filter{States: []store.State{store.Dead}, Queue: "pd"}
	for _, size := range []int{7, 6, 1, 30, store.MaxPageSize} {
		x.checkIDs(fmt.Sprintf("dead listing, pages of %d", size), x.listIDs(f, size), want)
	}
	x.checkIDs("dead listing without queue filter", x.listIDs(store.Filter{States: []store.State{store.Dead}}, 7), want)

	// Jobs dying after the first page (newer dead_at) do not disturb it.
	first := x.list(f, store.Page{Limit: 7})
	got := jobIDs(first.Jobs)
	x.makeDead(at(2*time.Hour), deadSpec{job: store.NewJob{Queue: "pd", Kind: "k"}, deadAt: at(3 * time.Hour), class: failure.Permanent, reason: "r", fp: "f", err: "e"},
		deadSpec{job: store.NewJob{Queue: "pd", Kind: "k"}, deadAt: at(3 * time.Hour), class: failure.Permanent, reason: "r", fp: "f", err: "e"})
	for cursor := first.Next; cursor != ""; {
		res := x.list(f, store.Page{Cursor: cursor, Limit: 7})
		got = append(got, jobIDs(res.Jobs)...)
		cursor = res.Next
		if len(got) > 100 {
			x.t.Fatalf("pagination does not end")
		}
	}
	x.checkIDs("dead listing with deaths after the first page", got, want)
}

// testListCursorInvalid: a cursor the store did not make is ErrInvalid.
func testListCursorInvalid(x *h) {
	x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	for _, f := range []store.Filter{{}, {States: []store.State{store.Dead}}} {
		for _, cursor := range []string{"garbage", "%%%", "!!!!", "\x00\xff"} {
			res, err := x.s.List(x.ctx, f, store.Page{Cursor: cursor, Limit: 10})
			if !errors.Is(err, store.ErrInvalid) {
				x.t.Errorf("List(%+v) with cursor %q = %d jobs, %v; want an error wrapping store.ErrInvalid", f, cursor, len(res.Jobs), err)
			}
		}
	}
}

// testListErrorContainsUnicode: ErrorContains folds case beyond ASCII, as
// "case-insensitively" says and as Go's strings.EqualFold does.
func testListErrorContainsUnicode(x *h) {
	ids := x.makeDead(at(0),
		deadSpec{job: store.NewJob{Queue: "q", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "f", err: "Échec de connexion à l'hôte"},
		deadSpec{job: store.NewJob{Queue: "q", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "f", err: "ОШИБКА: отказано в доступе"},
		deadSpec{job: store.NewJob{Queue: "q", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "f", err: "plain ascii"},
	)
	cases := []struct {
		contains string
		want     []int64
	}{
		{"échec DE", []int64{ids[0]}},
		{"ÉCHEC", []int64{ids[0]}},
		{"L'HÔTE", []int64{ids[0]}},
		{"ошибка", []int64{ids[1]}},
		{"ОТКАЗАНО", []int64{ids[1]}},
	}
	for _, c := range cases {
		x.checkIDs(fmt.Sprintf("List with ErrorContains %q", c.contains), x.listIDs(store.Filter{ErrorContains: c.contains}, 10), c.want)
	}
}
