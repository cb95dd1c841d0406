package storetest

import (
	"fmt"
	"slices"

	"github.com/redrivehq/redrive/store"
)

// testPayloadMatchNUL: a payload holding the JSON escape \u0000 (valid
// JSON that an API client may send) does not break the payload match of
// listings and counts: the match selects the jobs it should, that one
// included, and a match value holding \u0000 is no error either.
func testPayloadMatchNUL(x *h) {
	jobs := x.enqueue(at(0),
		store.NewJob{Queue: "pmn", Kind: "k", Payload: raw(`{"id":1,"note":"a\u0000b"}`)},
		store.NewJob{Queue: "pmn", Kind: "k", Payload: raw(`{"id":1}`)},
		store.NewJob{Queue: "pmn", Kind: "k", Payload: raw(`{"id":2}`)},
	)
	for _, c := range []struct {
		field, value string
		want         []int64
	}{
		{"id", `1`, []int64{jobs[0].ID, jobs[1].ID}},
		{"id", `2`, []int64{jobs[2].ID}},
		{"note", `"a\u0000b"`, []int64{jobs[0].ID}},
	} {
		f := store.Filter{Queue: "pmn", PayloadField: c.field, PayloadValue: raw(c.value)}
		what := fmt.Sprintf("match payload.%s=%s", c.field, c.value)
		res, err := x.s.List(x.ctx, f, store.Page{Limit: 10})
		if err != nil {
			x.t.Errorf("%s: List: %v", what, err)
			continue
		}
		var got []int64
		for _, j := range res.Jobs {
			got = append(got, j.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			x.t.Errorf("%s: listed %v, want %v", what, got, c.want)
		}
		if n, err := x.s.Count(x.ctx, f); err != nil || n != int64(len(c.want)) {
			x.t.Errorf("%s: Count = %d, %v; want %d", what, n, err, len(c.want))
		}
	}
}
