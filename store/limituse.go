package store

import (
	"context"
	"strings"
	"time"
)

// MaxLimitGroups bounds how many groups LimitGroups returns.
const MaxLimitGroups = 1000

// LimitUse reads how the concurrency limits are used, group by group,
// for the dashboard and the API.
type LimitUse interface {
	// LimitGroups returns the groups of the limit named name that have a
	// running job, the busiest first (then by key), n of them at most
	// (1 to MaxLimitGroups). An unknown limit has none.
	LimitGroups(ctx context.Context, name string, n int) ([]LimitGroup, error)

	// JobLimit returns the concurrency limit the job id is under, its
	// group and the group's use now; ok is false when the job is under
	// none (or there is no such job).
	JobLimit(ctx context.Context, id int64) (l JobLimit, ok bool, err error)
}

// LimitGroup is one group of a concurrency limit and its running jobs.
type LimitGroup struct {
	// Key is the group's key ("" for the one group of a limit per queue
	// or per kind).
	Key string `json:"key"`
	// Running is how many of the group's jobs run now.
	Running int64 `json:"running"`
}

// JobLimit is the concurrency limit a job is under and the use of its
// group now.
type JobLimit struct {
	// Name is the limit's name, Key the job's group.
	Name string `json:"name"`
	Key  string `json:"key"`
	// Max is the limit's max now; Running how many jobs of the group run
	// now (the job included, if it runs).
	Max     int   `json:"max"`
	Running int64 `json:"running"`
	// NextStart is the earliest time the group's rate, or a hold on
	// Retry-After, lets a job of the group start (zero when neither has
	// held it lately); a job due before waits on it. The Client leaves
	// it zero once past.
	NextStart time.Time `json:"next_start,omitzero"`
	// Waiting is true when the job is due, not running, and its group is
	// full or held (by its rate, or a Retry-After, until NextStart): it
	// waits on the limit, without using an attempt, and starts when a
	// job of its group ends or the hold passes. Stores leave it false
	// (the Client sets it).
	Waiting bool `json:"waiting"`
}

// LimitSample is the use of a concurrency limit at the minute of a
// statistics snapshot.
type LimitSample struct {
	// InUse is how many of its jobs ran, all groups together; Busiest
	// the most in one group.
	InUse   int64 `json:"in_use"`
	Busiest int64 `json:"busiest"`
}

// The statistics snapshots (Store.Snapshot) also record the use of each
// concurrency limit with a running job, as rows of the queue "" (no
// queue has that name) named SnapLimitInUse or SnapLimitBusiest followed
// by the limit's name. A limit absent from a snapshot had no running job.
const (
	// SnapLimitInUse prefixes the row of a limit's running jobs.
	SnapLimitInUse = "limit_in_use."
	// SnapLimitBusiest prefixes the row of the most running in one group.
	SnapLimitBusiest = "limit_busiest."
)

// AddSnapshotRow adds a row read from the store's snapshots to sn: a
// counter, or (queue "") the use of a limit.
func AddSnapshotRow(sn *Snapshot, queue, name string, n int64) {
	if queue == "" {
		if sn.Limits == nil {
			sn.Limits = map[string]LimitSample{}
		}
		if l, ok := strings.CutPrefix(name, SnapLimitInUse); ok {
			s := sn.Limits[l]
			s.InUse = n
			sn.Limits[l] = s
		} else if l, ok := strings.CutPrefix(name, SnapLimitBusiest); ok {
			s := sn.Limits[l]
			s.Busiest = n
			sn.Limits[l] = s
		}
		return
	}
	if sn.Counters[queue] == nil {
		sn.Counters[queue] = map[string]int64{}
	}
	sn.Counters[queue][name] = n
}
