package store

import (
	"cmp"
	"slices"
)

// GroupCandidates returns, of groups counted but not yet probed (only
// Fingerprint and Count set), those that can rank among the first limit
// of the DLQ's groups: the limit largest, and every group as large as the
// smallest of them (a tie is broken by the last death, which the store
// reads next). Stores call it before they read each group's first and
// last dead job, so that a DLQ of many small causes costs no more reads
// than limit groups (and their ties).
func GroupCandidates(gs []Group, limit int) []Group {
	slices.SortFunc(gs, func(a, b Group) int { return cmp.Compare(b.Count, a.Count) })
	if limit <= 0 || len(gs) <= limit {
		return gs
	}
	least := gs[limit-1].Count
	n := limit
	for n < len(gs) && gs[n].Count == least {
		n++
	}
	return gs[:n]
}

// RankGroups sorts groups in the DLQ's order, largest first, then the
// most recent last death first, then by fingerprint, and keeps the first
// limit. It never returns nil.
func RankGroups(gs []Group, limit int) []Group {
	slices.SortFunc(gs, func(a, b Group) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		return cmp.Compare(a.Fingerprint, b.Fingerprint)
	})
	if limit > 0 && len(gs) > limit {
		gs = gs[:limit]
	}
	if gs == nil {
		gs = []Group{}
	}
	return gs
}
