package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redrivehq/redrive/internal/schedule"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// Periodic declares a job enqueued on a schedule: at each time a cron
// expression names in a time zone, or at every multiple of a fixed
// interval. Declare it in WorkerOptions.Periodic; every worker sharing a
// store may declare the same schedules, and each occurrence is enqueued
// once across all of them (see docs/design.md, "Periodic jobs").
type Periodic struct {
	// Name identifies the schedule in the store, the API and the CLI (a
	// name as CheckName accepts). The jobs of an occurrence have the
	// idempotency key "periodic:<name>:<occurrence in Unix milliseconds>".
	Name string
	// Cron is a five-field cron expression ("0 2 * * *": minute, hour,
	// day of month, month, day of week) or one of @yearly, @annually,
	// @monthly, @weekly, @daily, @midnight, @hourly. Exactly one of Cron
	// and Every is set.
	Cron string
	// TimeZone is the IANA zone Cron is read in ("America/New_York");
	// empty means UTC. A wall-clock time skipped by a daylight saving
	// change runs when it would have been (02:30 on a spring-forward day
	// at 02:00 runs at 03:30), one that occurs twice runs once, at its
	// first occurrence.
	TimeZone string
	// Every is a fixed interval of at least a second, in whole
	// milliseconds: the schedule runs at every multiple of it since the
	// Unix epoch (every 1h: at each full hour UTC). It has no time zone.
	Every time.Duration
	// Kind is the kind of the jobs enqueued (required).
	Kind string
	// Payload is each job's payload, encoded as Enqueue encodes it.
	Payload any
	// Options apply to each job enqueued: InQueue, MaxRetries,
	// WithPolicy, Dependency, NotReprocessable, Priority. IdempotencyKey, At,
	// After and ReturnExisting are the schedule's to set and are
	// refused.
	Options []Option
	// Missed says what happens to the occurrences missed for longer
	// than Grace, while no process enqueued them (everything was down):
	// MissedSkip (the default) runs none of them, MissedRunOnce one job
	// for the latest of them.
	Missed Missed
	// Grace is how late an occurrence may still be enqueued: occurrences
	// missed for less (a leader hand-off, a restart) are all enqueued,
	// late; older ones follow Missed. Default DefaultPeriodicGrace.
	Grace time.Duration
}

// Missed is a periodic schedule's policy for the occurrences missed for
// longer than its grace period.
type Missed string

// The missed-run policies.
const (
	// MissedSkip runs none of the missed occurrences: the schedule goes
	// on from its next occurrence.
	MissedSkip Missed = "skip"
	// MissedRunOnce runs one job for the latest missed occurrence.
	MissedRunOnce Missed = "run_once"
)

// DefaultPeriodicGrace is how late an occurrence of a periodic schedule
// may be enqueued, by default (Periodic.Grace).
const DefaultPeriodicGrace = time.Minute

// maxPeriodicGrace bounds Periodic.Grace.
const maxPeriodicGrace = 7 * 24 * time.Hour

// periodicBatch bounds the occurrences one pass enqueues per schedule.
const periodicBatch = 1000

// periodicSpec is a schedule's declaration as stored: everything needed
// to list it and to enqueue its jobs (the API and the CLI trigger a
// schedule from it).
type periodicSpec struct {
	Cron             string          `json:"cron,omitempty"`
	Every            string          `json:"every,omitempty"`
	TimeZone         string          `json:"time_zone,omitempty"`
	Kind             string          `json:"kind"`
	Queue            string          `json:"queue"`
	Payload          json.RawMessage `json:"payload"`
	MaxRetries       *int            `json:"max_retries,omitempty"`
	Policy           *retry.Policy   `json:"policy,omitempty"`
	Dependency       string          `json:"dependency,omitempty"`
	NotReprocessable bool            `json:"not_reprocessable,omitempty"`
	Priority         int             `json:"priority,omitempty"`
	Missed           Missed          `json:"missed"`
	Grace            string          `json:"grace"`
	// DeclaredBy is the id of the worker that last declared the
	// schedule (empty in a compiled declaration, and in a spec stored
	// by an older redrive).
	DeclaredBy string `json:"declared_by,omitempty"`
}

// periodic is a validated Periodic.
type periodic struct {
	name  string
	spec  periodicSpec
	raw   json.RawMessage // spec encoded
	sched *schedule.Schedule
	grace time.Duration
	req   Request // the jobs' request, without RunAt and key
}

// Validate reports what is wrong with the declaration, as an error
// wrapping ErrInvalid that names the schedule and the field.
func (p Periodic) Validate() error {
	_, err := p.compile()
	return err
}

// compile validates p and prepares what the worker needs.
func (p Periodic) compile() (*periodic, error) {
	if err := CheckName("schedule name", p.Name); err != nil {
		return nil, fmt.Errorf("periodic: %w", err)
	}
	bad := func(field string, err error) error {
		return fmt.Errorf("periodic %q: %w: %s: %w", p.Name, ErrInvalid, field, err)
	}
	sched, err := schedule.Parse(schedule.Spec{Cron: p.Cron, Every: p.Every, Zone: p.TimeZone})
	if err != nil {
		var fe *schedule.FieldError
		if errors.As(err, &fe) {
			return nil, bad(fe.Field, fe.Err)
		}
		return nil, bad("cron", err)
	}
	r := Request{Kind: p.Kind, Payload: p.Payload}
	for _, o := range p.Options {
		o(&r)
	}
	switch {
	case r.IdempotencyKey != "":
		return nil, bad("options", errors.New("the schedule sets each job's idempotency key"))
	case !r.RunAt.IsZero() || r.Delay != 0:
		return nil, bad("options", errors.New("the schedule sets each job's run time"))
	case r.ReturnExisting:
		return nil, bad("options", errors.New("ReturnExisting is the schedule's to set"))
	}
	if r.Queue == "" {
		r.Queue = DefaultQueue
	}
	if err := CheckName("kind", r.Kind); err != nil {
		return nil, bad("kind", err)
	}
	if err := CheckName("queue", r.Queue); err != nil {
		return nil, bad("queue", err)
	}
	payload, err := encodePayload(r.Payload)
	if err != nil {
		return nil, bad("payload", err)
	}
	r.Payload = payload
	if r.MaxRetries != nil && *r.MaxRetries < 0 {
		return nil, bad("max_retries", fmt.Errorf("%d is negative", *r.MaxRetries))
	}
	if r.Policy != nil {
		if err := r.Policy.Validate(); err != nil {
			return nil, bad("policy", err)
		}
	}
	if r.Dependency != "" {
		if err := CheckName("dependency", r.Dependency); err != nil {
			return nil, bad("dependency", err)
		}
	}
	if r.Priority < MinPriority || r.Priority > MaxPriority {
		return nil, bad("priority", fmt.Errorf("%d is out of range: want an integer from %d to %d", r.Priority, MinPriority, MaxPriority))
	}
	missed := p.Missed
	switch missed {
	case "":
		missed = MissedSkip
	case MissedSkip, MissedRunOnce:
	default:
		return nil, bad("missed", fmt.Errorf("%q: want %q or %q", p.Missed, MissedSkip, MissedRunOnce))
	}
	grace := p.Grace
	switch {
	case grace == 0:
		grace = DefaultPeriodicGrace
	case grace < 0 || grace > maxPeriodicGrace:
		return nil, bad("grace", fmt.Errorf("%s is not within 0..%s", grace, maxPeriodicGrace))
	}
	spec := periodicSpec{Cron: p.Cron, TimeZone: p.TimeZone, Kind: r.Kind, Queue: r.Queue, Payload: payload,
		MaxRetries: r.MaxRetries, Policy: r.Policy, Dependency: r.Dependency, NotReprocessable: r.NotReprocessable,
		Priority: r.Priority, Missed: missed, Grace: grace.String()}
	if p.Every != 0 {
		spec.Every = p.Every.String()
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, bad("payload", err)
	}
	return &periodic{name: p.Name, spec: spec, raw: b, sched: sched, grace: grace, req: r}, nil
}

// decodeSpec reads a stored spec back, its payload opened by c (the
// store's payload codec, nil for none) when it was stored sealed.
func decodeSpec(name string, raw json.RawMessage, c store.PayloadCodec) (*periodic, error) {
	var s periodicSpec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("schedule %q: stored spec: %w", name, err)
	}
	if seal.IsSealed(s.Payload) {
		if c == nil {
			return nil, fmt.Errorf("schedule %q: payload: %s: sealed, and the store has no payload keys", name, store.ReasonUndecryptable)
		}
		plain, err := c.Open(s.Queue, s.Payload)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: payload: %s: %w", name, store.ReasonUndecryptable, err)
		}
		s.Payload = plain
	}
	p := Periodic{Name: name, Cron: s.Cron, TimeZone: s.TimeZone, Kind: s.Kind, Payload: s.Payload, Missed: s.Missed,
		Options: []Option{InQueue(s.Queue)}}
	var err error
	if s.Every != "" {
		if p.Every, err = time.ParseDuration(s.Every); err != nil {
			return nil, fmt.Errorf("schedule %q: stored spec: every: %w", name, err)
		}
	}
	if s.Grace != "" {
		if p.Grace, err = time.ParseDuration(s.Grace); err != nil {
			return nil, fmt.Errorf("schedule %q: stored spec: grace: %w", name, err)
		}
	}
	if s.MaxRetries != nil {
		p.Options = append(p.Options, MaxRetries(*s.MaxRetries))
	}
	if s.Policy != nil {
		p.Options = append(p.Options, WithPolicy(*s.Policy))
	}
	if s.Dependency != "" {
		p.Options = append(p.Options, Dependency(s.Dependency))
	}
	if s.NotReprocessable {
		p.Options = append(p.Options, NotReprocessable())
	}
	if s.Priority != 0 {
		p.Options = append(p.Options, Priority(s.Priority))
	}
	return p.compile()
}

// PeriodicKey returns the idempotency key of the job of a schedule's
// occurrence: "periodic:<name>:<occurrence in Unix milliseconds>".
func PeriodicKey(name string, occurrence time.Time) string {
	return "periodic:" + name + ":" + strconv.FormatInt(occurrence.UnixMilli(), 10)
}

// ScheduleInfo is a periodic schedule as the store keeps it: its
// declaration as last declared, its state and its runs.
type ScheduleInfo struct {
	// Name identifies the schedule.
	Name string `json:"name"`
	// Cron is its cron expression, read in TimeZone (empty: UTC); Every
	// its interval as Go writes durations ("1m0s"). One of the two is
	// set.
	Cron     string `json:"cron,omitempty"`
	Every    string `json:"every,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	// Kind and Queue are those of its jobs; Payload each job's payload.
	Kind    string          `json:"kind"`
	Queue   string          `json:"queue"`
	Payload json.RawMessage `json:"payload"`
	// Missed is its missed-run policy, Grace how late an occurrence may
	// still be enqueued ("1m0s").
	Missed Missed `json:"missed"`
	Grace  string `json:"grace"`
	// Paused is set while the schedule enqueues nothing; PausedAt is
	// when it was paused.
	Paused   bool      `json:"paused"`
	PausedAt time.Time `json:"paused_at,omitzero"`
	// NextRun is the next occurrence (absent while paused).
	NextRun time.Time `json:"next_run,omitzero"`
	// LastRun is the latest occurrence enqueued and LastJobID its job
	// (absent before the first).
	LastRun   time.Time `json:"last_run,omitzero"`
	LastJobID int64     `json:"last_job_id,omitempty"`
	// DeclaredAt is when a worker last declared the schedule (at its
	// start, then every PeriodicRedeclareEvery while it runs), and
	// DeclaredBy that worker's id (GET /v1/workers lists it; empty for
	// a schedule declared by an older redrive).
	DeclaredAt time.Time `json:"declared_at"`
	DeclaredBy string    `json:"declared_by,omitempty"`
	// Error says why the stored declaration cannot be read (declared by
	// another version of redrive); the other fields may then be empty.
	Error string `json:"error,omitempty"`
}

// scheduleInfo presents a stored schedule, its payload opened.
func (c *Client) scheduleInfo(sc store.Schedule) ScheduleInfo {
	in := ScheduleInfo{Name: sc.Name, Paused: sc.Paused, PausedAt: sc.PausedAt, LastRun: sc.LastRun, LastJobID: sc.LastJobID,
		DeclaredAt: sc.DeclaredAt}
	p, err := decodeSpec(sc.Name, sc.Spec, c.payloadCodec())
	if err != nil {
		in.Error = err.Error()
		return in
	}
	s := p.spec
	in.DeclaredBy = specDeclarer(sc.Spec)
	in.Cron, in.Every, in.TimeZone, in.Kind, in.Queue, in.Payload, in.Missed, in.Grace =
		s.Cron, s.Every, s.TimeZone, s.Kind, s.Queue, s.Payload, s.Missed, s.Grace
	if !sc.Paused {
		// The next occurrence not yet decided: what the leader enqueues
		// next (it may be due already, while no leader runs).
		in.NextRun = p.sched.Next(sc.Cursor)
	}
	return in
}

// Schedules lists the periodic schedules declared in the store, sorted by
// name.
func (c *Client) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	list, err := c.store.ListSchedules(ctx)
	if err != nil {
		return nil, fmt.Errorf("redrive: schedules: %w", err)
	}
	out := make([]ScheduleInfo, len(list))
	for i, sc := range list {
		out[i] = c.scheduleInfo(sc)
	}
	return out, nil
}

// Schedule returns one periodic schedule; an unknown name is an error
// wrapping ErrNotFound.
func (c *Client) Schedule(ctx context.Context, name string) (ScheduleInfo, error) {
	sc, err := c.store.GetSchedule(ctx, name)
	if err != nil {
		return ScheduleInfo{}, fmt.Errorf("redrive: schedule: %w", err)
	}
	return c.scheduleInfo(sc), nil
}

// PauseSchedule pauses a periodic schedule: nothing is enqueued for it
// until it is resumed, and the occurrences of the pause are never run. It
// is idempotent; an unknown name is an error wrapping ErrNotFound.
func (c *Client) PauseSchedule(ctx context.Context, name string) (ScheduleInfo, error) {
	now := c.now()
	sc, err := c.store.PauseSchedule(ctx, name, true, time.Time{}, now)
	if err != nil {
		return ScheduleInfo{}, fmt.Errorf("redrive: pause schedule: %w", err)
	}
	return c.scheduleInfo(sc), nil
}

// ResumeSchedule resumes a paused periodic schedule from now: its next
// occurrence after now is the next enqueued. It is idempotent; an unknown
// name is an error wrapping ErrNotFound.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (ScheduleInfo, error) {
	now := c.now().Truncate(time.Millisecond)
	var next time.Time
	if sc, err := c.store.GetSchedule(ctx, name); err != nil {
		return ScheduleInfo{}, fmt.Errorf("redrive: resume schedule: %w", err)
	} else if p, err := decodeSpec(name, sc.Spec, c.payloadCodec()); err == nil {
		next = p.sched.Next(now)
	}
	sc, err := c.store.PauseSchedule(ctx, name, false, next, now)
	if err != nil {
		return ScheduleInfo{}, fmt.Errorf("redrive: resume schedule: %w", err)
	}
	return c.scheduleInfo(sc), nil
}

// DeleteSchedule deletes a periodic schedule that no worker declares any
// more, with its state. A schedule whose last declarer is a live worker
// (WorkerLive in Workers: it runs and declares it) is refused with a
// *ScheduleDeclaredError, which wraps ErrConflict: deleted, it would be
// declared again within seconds, as new and not paused. An unknown name
// is an error wrapping ErrNotFound.
//
// Only the last declarer is known: when two workers declare a schedule
// and the last one stops, the other declares it again within
// PeriodicRedeclareEvery, and until then the schedule may be deleted (it
// comes back, as new).
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	sc, err := c.store.GetSchedule(ctx, name)
	if err != nil {
		return fmt.Errorf("redrive: delete schedule: %w", err)
	}
	if w, ok, err := c.scheduleDeclarer(ctx, sc); err != nil {
		return fmt.Errorf("redrive: delete schedule: %w", err)
	} else if ok {
		return &ScheduleDeclaredError{Schedule: name, Worker: w}
	}
	ok, err := c.store.DeleteSchedule(ctx, name)
	if err != nil {
		return fmt.Errorf("redrive: delete schedule: %w", err)
	}
	if !ok {
		return fmt.Errorf("redrive: delete schedule: %q: %w", name, store.ErrNoSchedule)
	}
	c.log.Info("schedule deleted", "schedule", name)
	return nil
}

// scheduleDeclarer returns the live worker that last declared sc, if
// any.
func (c *Client) scheduleDeclarer(ctx context.Context, sc store.Schedule) (WorkerStatus, bool, error) {
	by := specDeclarer(sc.Spec)
	if by == "" {
		return WorkerStatus{}, false, nil
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		return WorkerStatus{}, false, err
	}
	for _, w := range ws {
		if w.ID == by && w.State == WorkerLive {
			return w, true, nil
		}
	}
	return WorkerStatus{}, false, nil
}

// specDeclarer returns the worker id a stored spec names as its last
// declarer ("" for none, or a spec that cannot be read).
func specDeclarer(raw json.RawMessage) string {
	var spec struct {
		DeclaredBy string `json:"declared_by"`
	}
	if json.Unmarshal(raw, &spec) != nil {
		return ""
	}
	return spec.DeclaredBy
}

// ScheduleDeclaredError is DeleteSchedule's refusal of a schedule that a
// live worker declares. It wraps ErrConflict.
type ScheduleDeclaredError struct {
	// Schedule is the schedule's name; Worker the live worker that last
	// declared it.
	Schedule string
	Worker   WorkerStatus
}

func (e *ScheduleDeclaredError) Error() string {
	return fmt.Sprintf("schedule %q is declared by the running worker %s (host %s, pid %d, started %s): "+
		"remove it from that process's schedules (serve's schedules setting, or WorkerOptions.Periodic) and restart it, "+
		"then delete it; deleted now, it would be declared again within seconds",
		e.Schedule, e.Worker.ID, e.Worker.Host, e.Worker.PID, e.Worker.StartedAt.UTC().Format(time.RFC3339))
}

// Unwrap returns ErrConflict.
func (e *ScheduleDeclaredError) Unwrap() error { return ErrConflict }

// TriggerSchedule enqueues one job of a periodic schedule now, outside its
// schedule, whether or not it is paused, and returns it. The job's
// idempotency key is "periodic:<name>:trigger:<now in Unix
// milliseconds>": it does not take the key of any occurrence. An unknown
// name is an error wrapping ErrNotFound.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (*Job, error) {
	sc, err := c.store.GetSchedule(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("redrive: trigger schedule: %w", err)
	}
	p, err := decodeSpec(name, sc.Spec, c.payloadCodec())
	if err != nil {
		return nil, fmt.Errorf("redrive: trigger schedule: %w", err)
	}
	r := p.req
	r.IdempotencyKey = "periodic:" + name + ":trigger:" + strconv.FormatInt(c.now().UnixMilli(), 10)
	r.ReturnExisting = true
	jobs, err := c.EnqueueMany(ctx, []Request{r})
	if err != nil {
		return nil, fmt.Errorf("redrive: trigger schedule %q: %w", name, err)
	}
	c.log.Info("periodic job triggered", "schedule", name, jobAttr(jobs[0]), "kind", jobs[0].Kind, "queue", jobs[0].Queue)
	return jobs[0], nil
}

// compilePeriodic validates the worker's schedules, their payloads with
// the validators of their kinds (Client.SetValidator) too, as an enqueue
// would.
func (w *Worker) compilePeriodic() ([]*periodic, error) {
	ps, err := compilePeriodic(w.opts.Periodic)
	if err != nil {
		return nil, err
	}
	vs := w.client.validators.Load()
	for _, p := range ps {
		if len(p.spec.Payload) > w.client.maxPayload {
			return nil, fmt.Errorf("periodic %q: %w: payload: %d bytes, the limit is %d", p.name, ErrInvalid, len(p.spec.Payload), w.client.maxPayload)
		}
		if vs == nil {
			continue
		}
		if v := (*vs)[p.req.Kind]; v != nil {
			if err := v(p.spec.Payload); err != nil {
				return nil, fmt.Errorf("periodic %q: %w: payload: %w", p.name, ErrInvalid, err)
			}
		}
	}
	return ps, nil
}

// warnPeriodic logs a warning for each schedule whose jobs this worker
// will not run: one enqueueing to a queue it does not work, or of a kind
// it has no handler for. Neither is refused (another process on the
// store may run them, as when one process declares the schedules of a
// fleet), but nothing runs such jobs until a worker that does starts.
func (w *Worker) warnPeriodic(ps []*periodic) {
	worked := make(map[string]bool, len(w.queues))
	names := make([]string, 0, len(w.queues))
	for _, q := range w.queues {
		worked[q.name] = true
		names = append(names, q.name)
	}
	kinds := w.exec.Kinds()
	for _, p := range ps {
		if !worked[p.req.Queue] {
			w.log.Warn("periodic: the schedule enqueues to a queue this worker does not work; its jobs wait for a worker of that queue",
				"schedule", p.name, "queue", p.req.Queue, "worker_queues", names)
		}
		if !slices.Contains(kinds, p.req.Kind) {
			w.log.Warn("periodic: the schedule enqueues a kind this worker has no handler for; its jobs wait for a worker that has one",
				"schedule", p.name, "kind", p.req.Kind, "worker_kinds", kinds)
		}
	}
}

// compilePeriodic validates schedules.
func compilePeriodic(ps []Periodic) ([]*periodic, error) {
	out := make([]*periodic, 0, len(ps))
	seen := map[string]bool{}
	for i := range ps {
		p, err := ps[i].compile()
		if err != nil {
			return nil, err
		}
		if seen[p.name] {
			return nil, fmt.Errorf("periodic %q: %w: name: declared twice", p.name, ErrInvalid)
		}
		seen[p.name] = true
		out = append(out, p)
	}
	return out, nil
}

// declarePeriodic records the worker's schedules in the store and
// reports whether all were recorded.
func (w *Worker) declarePeriodic(ctx context.Context, ps []*periodic) bool {
	now := w.client.now().Truncate(time.Millisecond)
	for _, p := range ps {
		spec := p.spec
		spec.DeclaredBy = w.id
		// The store keeps the payload as it keeps a job's: sealed for an
		// encrypted queue (under the current key, at each declaration).
		if c := w.client.payloadCodec(); c != nil {
			sealed, err := c.Seal(spec.Queue, spec.Payload)
			if err != nil {
				w.log.Error("periodic: sealing a schedule's payload failed", "schedule", p.name, "error", err)
				return false
			}
			spec.Payload = sealed
		}
		raw, err := json.Marshal(spec)
		if err != nil {
			w.log.Error("periodic: encoding a schedule failed", "schedule", p.name, "error", err)
			return false
		}
		d := store.ScheduleDecl{Name: p.name, Spec: raw, Cursor: now, NextRun: p.sched.Next(now)}
		sc, err := w.store.DeclareSchedule(ctx, d, now)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("periodic: declaring a schedule failed", "schedule", p.name, "error", err)
			}
			return false
		}
		w.log.Debug("periodic: schedule declared", "schedule", p.name, "cursor", sc.Cursor, "paused", sc.Paused)
	}
	return true
}

// enqueuePeriodic enqueues the due occurrences of every schedule once and
// returns how long to wait before the next pass (the time to the next
// occurrence, at most a second), and whether a schedule is missing from
// the store (deleted: declare again).
func (w *Worker) enqueuePeriodic(ctx context.Context, ps []*periodic) (wait time.Duration, redeclare bool) {
	wait = time.Second
	list, err := w.store.ListSchedules(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("periodic: reading schedules failed", "error", err)
		}
		return wait, false
	}
	stored := make(map[string]store.Schedule, len(list))
	for _, sc := range list {
		stored[sc.Name] = sc
	}
	now := w.client.now()
	for _, p := range ps {
		sc, ok := stored[p.name]
		if !ok {
			redeclare = true
			continue
		}
		if sc.Paused {
			continue
		}
		next, err := w.runPeriodic(ctx, p, sc, now)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("periodic: enqueuing failed", "schedule", p.name, "error", err)
			}
			continue
		}
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(now), time.Millisecond))
		}
	}
	return wait, redeclare
}

// runPeriodic enqueues what one schedule has due at now, advances its
// cursor, and returns its next occurrence (zero when more is due at
// once, or none).
func (w *Worker) runPeriodic(ctx context.Context, p *periodic, sc store.Schedule, now time.Time) (time.Time, error) {
	plan := p.sched.Plan(sc.Cursor, now, p.grace, schedule.Missed(p.spec.Missed), periodicBatch)
	if len(plan.Run) == 0 && plan.Cursor.Equal(sc.Cursor) {
		return plan.Next, nil
	}
	adv := store.ScheduleAdvance{Name: p.name, From: sc.Cursor, To: plan.Cursor, NextRun: plan.Next, Now: now}
	if len(plan.Run) > 0 {
		reqs := make([]Request, len(plan.Run))
		for i, occ := range plan.Run {
			r := p.req
			r.RunAt = occ
			r.IdempotencyKey = PeriodicKey(p.name, occ)
			r.ReturnExisting = true
			reqs[i] = r
		}
		jobs, err := w.client.EnqueueMany(ctx, reqs)
		if err != nil {
			return time.Time{}, err
		}
		for i, j := range jobs {
			if !j.Existing {
				w.log.Info("periodic job enqueued", "schedule", p.name, "occurrence", plan.Run[i], jobAttr(j),
					"kind", j.Kind, "queue", j.Queue, "late", now.Sub(plan.Run[i]))
			}
		}
		last := len(jobs) - 1
		adv.LastRun, adv.LastJobID = plan.Run[last], jobs[last].ID
	}
	if plan.Skipped {
		w.log.Warn("periodic: missed occurrences skipped", "schedule", p.name, "missed", p.spec.Missed,
			"since", sc.Cursor, "grace", p.grace)
	}
	applied, err := w.store.AdvanceSchedule(ctx, adv)
	if err != nil {
		return time.Time{}, err
	}
	if !applied {
		w.log.Debug("periodic: another process advanced the schedule first", "schedule", p.name)
	}
	if len(plan.Run) == periodicBatch {
		return now, nil // more may be due: go on at once
	}
	return plan.Next, nil
}
