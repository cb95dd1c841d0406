package storetest

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testListErrorPrefix: Filter.ErrorPrefix selects the jobs whose error
// starts with the text, byte for byte (case, accents, no wildcards),
// errors longer than the index's key included; listings (dead-only, by
// pages, with a second filter), counts and groups agree with a model.
func testListErrorPrefix(x *h) {
	long := strings.Repeat("x", store.ErrorPrefixKeyLen+50)
	edge := strings.Repeat("x", store.ErrorPrefixKeyLen-1)
	families := []struct {
		fp    string
		queue string
		n     int
		msg   func(i int) string
	}{
		{"fpRefused", "epq", 7, func(i int) string { return fmt.Sprintf("connection refused: 10.0.0.%d", i) }},
		{"fpUpper", "epq", 2, func(i int) string { return "Connection refused" }},
		{"fpReset", "epq2", 3, func(i int) string { return fmt.Sprintf("connection reset #%d", i) }},
		{"fpShort", "epq", 1, func(i int) string { return "conn" }},
		{"fpAcute", "epq", 4, func(i int) string { return fmt.Sprintf("é %d", i) }},
		{"fpCirc", "epq2", 5, func(i int) string { return "ê" }},
		{"fpLongA", "epq", 8, func(i int) string { return fmt.Sprintf("%sA%d", long, i) }},
		{"fpLongB", "epq2", 9, func(i int) string { return long + "B" }},
		{"fpEdge", "epq", 10, func(i int) string { return edge + "y" }},
		{"fpMaxRune", "epq2", 11, func(i int) string { return fmt.Sprintf("\U0010FFFF\U0010FFFF %d", i) }},
		{"fpD7FF", "epq", 12, func(i int) string { return "\uD7FF" }},
		{"fpE000", "epq2", 13, func(i int) string { return "\uE000" }},
		{"fpPercent", "epq", 14, func(i int) string { return fmt.Sprintf("100%% done %d", i) }},
		{"fpUnder", "epq2", 15, func(i int) string { return "rate_1" }},
		{"fpRateX", "epq", 16, func(i int) string { return "rateX1" }},
	}
	total := 0
	for _, fam := range families {
		total += fam.n
	}
	// dead_at interleaves the families (a step coprime with the total),
	// and pairs of jobs share one, ordered by id.
	k := 0
	var recs []deadRec
	for _, queue := range []string{"epq", "epq2"} {
		var specs []deadSpec
		var fps []string
		for _, fam := range families {
			if fam.queue != queue {
				continue
			}
			for i := 1; i <= fam.n; i++ {
				deadAt := at(time.Duration((k*37)%total/2) * time.Second)
				k++
				specs = append(specs, deadSpec{job: store.NewJob{Queue: queue, Kind: "ep"}, deadAt: deadAt,
					class: failure.Transient, reason: "r", fp: fam.fp, err: fam.msg(i)})
				fps = append(fps, fam.fp)
			}
		}
		for i, id := range x.makeDead(at(0), specs...) {
			recs = append(recs, deadRec{id: id, queue: queue, kind: "ep", class: failure.Transient, reason: "r", fp: fps[i], err: specs[i].err, deadAt: specs[i].deadAt})
		}
	}
	// A job that is not dead, with no error.
	x.enqueue(at(0), store.NewJob{Queue: "epq", Kind: "ep"})

	dead := []store.State{store.Dead}
	for _, p := range []string{
		"connection refused", "connection", "Connection", "conn", "c", "connection refused: 10.0.0.7", "nothing",
		"é", "ê", "e",
		long, long + "A", long + "A3", edge, edge + "x", edge + "y", strings.Repeat("x", 10),
		"\U0010FFFF", "\U0010FFFF\U0010FFFF", "\uD7FF", "\uE000",
		"100%", "100% done 1", "rate_", "rate_1", "rate",
	} {
		keep := func(r deadRec) bool { return strings.HasPrefix(r.err, p) }
		var want []deadRec
		for _, r := range recs {
			if keep(r) {
				want = append(want, r)
			}
		}
		name := p
		if utf8.RuneCountInString(name) > 24 {
			name = fmt.Sprintf("%.20s… (%d characters)", name, utf8.RuneCountInString(p))
		}
		f := store.Filter{States: dead, ErrorPrefix: p}
		for _, size := range []int{store.MaxPageSize, 3, 1} {
			x.checkIDs(fmt.Sprintf("List dead with ErrorPrefix %q, pages of %d", name, size), x.listIDs(f, size), deadOrder(want))
		}
		n, err := x.s.Count(x.ctx, f)
		if err != nil || n != int64(len(want)) {
			x.t.Errorf("Count dead with ErrorPrefix %q = %d, %v; want %d", name, n, err, len(want))
		}
		x.checkGroups(fmt.Sprintf("Groups with ErrorPrefix %q", name), x.groups(f, 100), wantGroups(recs, keep, 100))
		// Every state: only dead jobs have errors here; ordered by id.
		x.checkIDs(fmt.Sprintf("List with ErrorPrefix %q", name), x.listIDs(store.Filter{ErrorPrefix: p}, 4), sortedDesc(want))
		// With a second filter, the queue.
		var inQueue []deadRec
		for _, r := range want {
			if r.queue == "epq2" {
				inQueue = append(inQueue, r)
			}
		}
		x.checkIDs(fmt.Sprintf("List dead in epq2 with ErrorPrefix %q, pages of 2", name),
			x.listIDs(store.Filter{States: dead, Queue: "epq2", ErrorPrefix: p}, 2), deadOrder(inQueue))
	}

	// Text no store can compare is refused, not matched.
	for _, p := range []string{"bad \xff", "nul \x00"} {
		_, err := x.s.List(x.ctx, store.Filter{States: dead, ErrorPrefix: p}, store.Page{})
		x.checkErr(fmt.Sprintf("List with ErrorPrefix %q", p), err, store.ErrInvalid)
		_, err = x.s.Count(x.ctx, store.Filter{States: dead, ErrorPrefix: p})
		x.checkErr(fmt.Sprintf("Count with ErrorPrefix %q", p), err, store.ErrInvalid)
	}
}

// sortedDesc is the ids of recs, largest first.
func sortedDesc(recs []deadRec) []int64 {
	ids := make([]int64, len(recs))
	for i, r := range recs {
		ids[i] = r.id
	}
	out := sorted(ids)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
