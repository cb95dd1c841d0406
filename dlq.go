package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive/store"
)

// DeadGroups counts the dead jobs matching f by cause (error fingerprint),
// largest first, so an operator sees causes rather than rows.
func (c *Client) DeadGroups(ctx context.Context, f Filter, limit int) ([]Group, error) {
	return c.store.Groups(ctx, f, limit)
}

// RedriveRequest says which dead jobs to redrive and how.
type RedriveRequest struct {
	// IDs redrives these jobs. When empty, Filter selects them (its States
	// are ignored: only dead jobs are redriven).
	IDs    []int64
	Filter Filter
	// Rate bounds how many jobs per second are redriven (0: no bound), so
	// a redrive of millions does not flood the workers or a dependency
	// that has just recovered.
	Rate float64
	// Payload, when not nil, replaces the payload of every redriven job
	// (edit and redrive).
	Payload any
	// Note is recorded in each job's history (who, why).
	Note string
	// Progress, when not nil, is called once the selection is counted
	// (Matched set, nothing done yet), after each batch, and at the end
	// (Done set), on the goroutine that called Redrive.
	Progress func(RedriveProgress)
}

// RedriveProgress reports a redrive under way, and its final result.
type RedriveProgress struct {
	// Matched is how many jobs the request selected when it started.
	Matched  int64 `json:"matched"`
	Redriven int64 `json:"redriven"`
	// Refused counts jobs marked not reprocessable.
	Refused int64 `json:"refused"`
	// Skipped counts jobs that were gone or no longer dead.
	Skipped int64 `json:"skipped"`
	// Unblocks counts the blocked jobs of workflows waiting directly for
	// the jobs redriven (store.RedriveResult.Unblocks): released when
	// those complete, if nothing else holds them. Summed over the
	// redrive's batches of 500 jobs (a job waiting for two redriven in
	// different batches counts twice).
	Unblocks int64   `json:"unblocks,omitempty"`
	Done     bool    `json:"done"`
	Refusals []int64 `json:"refused_ids,omitempty"`
}

const redriveBatch = 500

// Redrive moves dead jobs back to pending: their attempt counter resets,
// their history is kept with a redriven event. Jobs marked not
// reprocessable are refused and reported. It returns the final progress;
// when ctx ends midway, the progress so far and ctx's error.
//
// The redrive is a span (a child of ctx's), linked to the traces of the
// jobs it redrives (up to 128): their next attempts stay in the trace
// they were enqueued in.
func (c *Client) Redrive(ctx context.Context, r RedriveRequest) (prog RedriveProgress, err error) {
	payload, err := c.checkRedrive(r)
	if err != nil {
		return prog, fmt.Errorf("redrive: redrive: %w", err)
	}
	span := trace.SpanFromContext(context.Background()) // a no-op span: tracing off
	if c.tracer != nil {
		ctx, span = c.startRedrive(ctx, "redrive")
	}
	links := 0
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(AttrRedriveJobs.Int64(prog.Redriven))
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End(trace.WithTimestamp(c.now()))
	}()
	if err := c.validateRedrivePayload(ctx, r.IDs, r.Filter, payload); err != nil {
		return prog, fmt.Errorf("redrive: redrive: %w", err)
	}
	keys, err := c.redriveKeys(ctx, r.IDs, r.Filter, payload)
	if err != nil {
		return prog, fmt.Errorf("redrive: redrive: %w", err)
	}
	f := r.Filter
	f.States = []State{Dead}
	if len(r.IDs) > 0 {
		f = Filter{IDs: r.IDs}
		prog.Matched = int64(len(r.IDs))
	} else {
		n, err := c.Count(ctx, f)
		if err != nil {
			return prog, err
		}
		prog.Matched = n
	}
	if r.Progress != nil {
		r.Progress(prog)
	}
	batch := redriveBatch
	if r.Rate > 0 && float64(batch) > r.Rate {
		batch = max(1, int(r.Rate))
	}
	start := time.Now()
	queues := map[string]bool{}
	apply := func(ids []int64) error {
		if r.Rate > 0 {
			// Pace: the jobs redriven so far may not exceed rate * elapsed.
			due := start.Add(time.Duration(float64(prog.Redriven+prog.Refused+prog.Skipped) / r.Rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
		}
		res, err := c.store.Redrive(ctx, store.RedriveParams{IDs: ids, Now: c.now(), Payload: payload, Note: r.Note, Keys: keys})
		if err != nil {
			return err
		}
		if span.IsRecording() && links < maxRedriveLinks && len(res.Redriven) > 0 && len(r.IDs) > 0 {
			// Redriven by id: read their traces (a walk of the DLQ has them).
			if got, err := c.store.List(ctx, Filter{IDs: res.Redriven[:min(len(res.Redriven), maxRedriveLinks-links)]},
				store.Page{Limit: maxRedriveLinks}); err == nil {
				linkJobs(span, got.Jobs, &links)
			}
		}
		prog.Redriven += int64(len(res.Redriven))
		prog.Refused += int64(len(res.Refused))
		prog.Skipped += int64(len(res.Skipped))
		prog.Unblocks += res.Unblocks
		if len(prog.Refusals) < 1000 {
			prog.Refusals = append(prog.Refusals, res.Refused[:min(len(res.Refused), 1000-len(prog.Refusals))]...)
		}
		if len(res.Redriven) > 0 {
			c.log.Info("dead jobs redriven", "count", len(res.Redriven), "refused", len(res.Refused), "note", r.Note)
		}
		if r.Progress != nil {
			r.Progress(prog)
		}
		return nil
	}
	if len(r.IDs) > 0 {
		for i := 0; i < len(r.IDs); i += batch {
			if err := apply(r.IDs[i:min(i+batch, len(r.IDs))]); err != nil {
				return prog, fmt.Errorf("redrive: redrive: %w", err)
			}
		}
	} else {
		// Walk the DLQ by keyset; redriven jobs leave it, which does not
		// disturb a keyset walk.
		page := store.Page{Limit: batch}
		for {
			res, err := c.store.List(ctx, f, page)
			if err != nil {
				return prog, fmt.Errorf("redrive: redrive: %w", err)
			}
			ids := make([]int64, len(res.Jobs))
			for i, j := range res.Jobs {
				ids[i] = j.ID
				queues[j.Queue] = true
			}
			if span.IsRecording() {
				linkJobs(span, res.Jobs, &links)
			}
			if len(ids) > 0 {
				if err := apply(ids); err != nil {
					return prog, fmt.Errorf("redrive: redrive: %w", err)
				}
			}
			if res.Next == "" {
				break
			}
			page.Cursor = res.Next
		}
	}
	prog.Done = true
	if r.Progress != nil {
		r.Progress(prog)
	}
	now := c.now()
	if len(queues) == 0 {
		// Redrive by ids: wake every queue a local worker serves.
		for _, q := range c.wokenQueues() {
			queues[q] = true
		}
	}
	for q := range queues {
		c.wake(q, now)
	}
	return prog, nil
}

// ValidateRedrive reports the error Redrive would return for r before
// touching the store (a negative rate, a payload that does not encode or
// is larger than the client's MaxPayload), wrapping ErrInvalid, so that a
// caller starting a redrive in the background can refuse bad input first.
func (c *Client) ValidateRedrive(r RedriveRequest) error {
	if _, err := c.checkRedrive(r); err != nil {
		return fmt.Errorf("redrive: redrive: %w", err)
	}
	return nil
}

// checkRedrive validates r and returns its encoded replacement payload
// (nil when none).
func (c *Client) checkRedrive(r RedriveRequest) (json.RawMessage, error) {
	if r.Rate < 0 {
		return nil, fmt.Errorf("%w: rate must not be negative", ErrInvalid)
	}
	if r.Payload == nil {
		return nil, nil
	}
	p, err := encodePayload(r.Payload)
	if err != nil {
		return nil, err
	}
	if len(p) > c.maxPayload {
		return nil, fmt.Errorf("%w: payload is %d bytes, the limit is %d", ErrInvalid, len(p), c.maxPayload)
	}
	return p, nil
}

// validateRedrivePayload runs on payload, the replacement payload of a
// redrive (nil: none), the validator of every kind (SetValidator) that has
// dead jobs among those the redrive selects (ids, else f), as an enqueue
// of that kind would: a payload the kind refuses is refused before any job
// is touched, rather than redriven to die at once.
func (c *Client) validateRedrivePayload(ctx context.Context, ids []int64, f Filter, payload json.RawMessage) error {
	vs := c.validators.Load()
	if payload == nil || vs == nil {
		return nil
	}
	if len(ids) > 0 {
		f = Filter{IDs: ids}
	}
	f.States = []State{Dead}
	for _, kind := range slices.Sorted(maps.Keys(*vs)) {
		if f.Kind != "" && f.Kind != kind {
			continue
		}
		fk := f
		fk.Kind = kind
		n, err := c.store.Count(ctx, fk)
		if err != nil {
			return fmt.Errorf("checking the payload against the selected jobs' kinds: %w", err)
		}
		if n == 0 {
			continue
		}
		if err := (*vs)[kind](payload); err != nil {
			return fmt.Errorf("%w: payload of kind %q (%d of the selected jobs): %w", ErrInvalid, kind, n, err)
		}
	}
	return nil
}

// redriveKeys returns the limit groups and fair keys that payload, the
// replacement payload of a redrive (nil: none), names for the client's
// limits and fair shares whose key reads the payload (payload.<field>,
// host), so that an edited job moves to the group its new payload names,
// as an enqueue of it would. A limit or fair share keyed on the
// dependency, or without a key, keeps each job's own. A payload that
// lacks a limit's or fair share's key refuses the redrive, naming the
// field, when the redrive selects dead jobs (ids, else f) of the queue
// or kind that limit or share selects; nothing is touched.
func (c *Client) redriveKeys(ctx context.Context, ids []int64, f Filter, payload json.RawMessage) (store.RedriveKeys, error) {
	var k store.RedriveKeys
	if payload == nil {
		return k, nil
	}
	if len(ids) > 0 {
		f = Filter{IDs: ids}
	}
	f.States = []State{Dead}
	selects := func(queue, kind string) (bool, error) {
		fk := f
		if queue != "" {
			if fk.Queue != "" && fk.Queue != queue {
				return false, nil
			}
			fk.Queue = queue
		}
		if kind != "" {
			if fk.Kind != "" && fk.Kind != kind {
				return false, nil
			}
			fk.Kind = kind
		}
		n, err := c.store.Count(ctx, fk)
		if err != nil {
			return false, fmt.Errorf("checking the payload's keys against the selected jobs: %w", err)
		}
		return n > 0, nil
	}
	keyOf := func(lk LimitKey) (string, error) {
		key, err := lk.of(payload, "")
		if err == nil && len(key) > store.MaxLimitName {
			err = fmt.Errorf("%s is longer than %d bytes", lk, store.MaxLimitName)
		}
		return key, err
	}
	if p := c.limits.Load(); p != nil {
		for i := range *p {
			l := &(*p)[i]
			if _, done := k.Limits[l.Name]; done || (l.key.Source != "payload" && l.key.Source != "host") {
				continue
			}
			key, err := keyOf(l.key)
			if err != nil {
				sel, cerr := selects(l.Queue, l.Kind)
				if cerr != nil {
					return k, cerr
				}
				if sel {
					return k, fmt.Errorf("%w: concurrency limit %q: %w", ErrInvalid, l.Name, err)
				}
				continue
			}
			if k.Limits == nil {
				k.Limits = map[string]string{}
			}
			k.Limits[l.Name] = key
		}
	}
	if p := c.fair.Load(); p != nil {
		for _, q := range slices.Sorted(maps.Keys(*p)) {
			fs := (*p)[q]
			if fs.key.Source != "payload" && fs.key.Source != "host" {
				continue
			}
			key, err := keyOf(fs.key)
			if err != nil {
				sel, cerr := selects(q, "")
				if cerr != nil {
					return k, cerr
				}
				if sel {
					return k, fmt.Errorf("%w: fair queue %q: %w", ErrInvalid, q, err)
				}
				continue
			}
			if k.Fair == nil {
				k.Fair = map[string]string{}
			}
			k.Fair[q] = key
		}
	}
	return k, nil
}

// Count returns how many jobs match f.
func (c *Client) Count(ctx context.Context, f Filter) (int64, error) {
	return c.store.Count(ctx, f)
}

// purgeBatch is how many dead jobs one transaction of Purge deletes.
const purgeBatch = 1000

// Purge deletes the dead jobs matching f (States are ignored) and returns
// how many were deleted. It deletes them in batches, one transaction
// each, so that a purge of millions never holds one long transaction;
// progress, when not nil, is called after each batch with the total
// deleted so far. When ctx ends midway, the batches already deleted stay
// deleted and Purge returns their count with ctx's error.
func (c *Client) Purge(ctx context.Context, f Filter, progress func(purged int64)) (int64, error) {
	var total int64
	for {
		n, err := c.store.Purge(ctx, f, purgeBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("redrive: purge: %w", err)
		}
		if progress != nil {
			progress(total)
		}
		if n < purgeBatch {
			return total, nil
		}
	}
}

// ExportedError is the error.json of an exported dead job.
type ExportedError struct {
	JobID       int64      `json:"job_id"`
	Attempts    int        `json:"attempts"`
	RetryCount  int        `json:"retry_count"`
	LastError   string     `json:"last_error"`
	Class       string     `json:"class"`
	Reason      string     `json:"reason"`
	Fingerprint string     `json:"fingerprint"`
	FailedAt    *time.Time `json:"failed_at,omitempty"`
	DeadAt      *time.Time `json:"dead_at,omitempty"`
	History     []Event    `json:"history"`
}

// ExportedMetadata is the metadata.json of an exported dead job.
type ExportedMetadata struct {
	JobID          int64     `json:"job_id"`
	Queue          string    `json:"queue"`
	Kind           string    `json:"kind"`
	CreatedAt      time.Time `json:"created_at"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Dependency     string    `json:"dependency,omitempty"`
	Reprocessable  bool      `json:"reprocessable"`
	Redriven       int       `json:"redriven"`
	MaxRetries     int       `json:"max_retries"`
	// PayloadSealed is the id of the key payload.json is sealed under
	// (an "rdenc:" envelope bound to Queue, which an import keeps as it
	// is: see docs/security.md), "" when payload.json is plaintext.
	PayloadSealed string `json:"payload_sealed,omitempty"`
}

// Export writes the dead jobs matching f to dir, one directory per job
// named by its id, holding payload.json (the original payload),
// error.json (ExportedError) and metadata.json (ExportedMetadata), as
// the dead-letter folder an ingestion pipeline keeps: one directory per job. It returns how many jobs it wrote.
// Existing job directories are overwritten; nothing else in dir is touched.
// dir is made if missing; it, the directories and the files an export
// makes are its owner's only (0700, 0600), and a symbolic link in dir
// leading out of it is never written through (the job fails).
//
// On a store with payload keys (sealing payloads at rest), a payload of
// a sealed queue, or stored sealed, is written sealed under the current
// key (Client.Exported says which); ExportDecrypted writes plaintext.
func (c *Client) Export(ctx context.Context, dir string, f Filter, progress func(n int)) (int, error) {
	return c.export(ctx, dir, f, false, progress)
}

// ExportDecrypted is Export writing every payload the store can open in
// plaintext: for an operator allowed to read them (the API asks for the
// admin role and records it in the audit log).
func (c *Client) ExportDecrypted(ctx context.Context, dir string, f Filter, progress func(n int)) (int, error) {
	return c.export(ctx, dir, f, true, progress)
}

func (c *Client) export(ctx context.Context, dir string, f Filter, decrypt bool, progress func(n int)) (int, error) {
	if dir == "" {
		return 0, fmt.Errorf("redrive: export: %w: empty directory", ErrInvalid)
	}
	root, err := openExportDir(dir)
	if err != nil {
		return 0, fmt.Errorf("redrive: export: %w", err)
	}
	defer root.Close()
	f.States = []State{Dead}
	page := store.Page{Limit: 200}
	n := 0
	for {
		res, err := c.store.List(ctx, f, page)
		if err != nil {
			return n, fmt.Errorf("redrive: export: %w", err)
		}
		for _, j := range res.Jobs {
			p, e, m, err := c.Exported(j, decrypt)
			if err == nil {
				err = exportFiles(root, ".", p, e, m)
			}
			if err != nil {
				return n, fmt.Errorf("redrive: export job %d: %w", j.ID, err)
			}
			n++
		}
		if progress != nil {
			progress(n)
		}
		if res.Next == "" {
			return n, nil
		}
		page.Cursor = res.Next
	}
}

// Exported returns what an export writes for the dead job j, as read
// through the client's store: payload.json, error.json and
// metadata.json. When the store seals payloads (sqlite.Options.Payloads,
// postgres.Options.Payloads), a payload of a sealed queue, or one stored
// sealed, is sealed again under the current key, bound to j's queue, and
// the metadata's PayloadSealed names the key; decrypt writes the
// plaintext instead. A payload the store could not open is written as
// it is stored (sealed), so that nothing is lost. The API's NDJSON
// export sends the same values.
func (c *Client) Exported(j *Job, decrypt bool) (json.RawMessage, ExportedError, ExportedMetadata, error) {
	e, m := ExportedFiles(j)
	p, key, err := store.ExportPayload(c.payloadCodec(), j, decrypt)
	if err != nil {
		return nil, e, m, err
	}
	m.PayloadSealed = key
	return p, e, m, nil
}

// payloadCodec returns the codec of the client's store, nil when it has
// none (or does not say).
func (c *Client) payloadCodec() store.PayloadCodec {
	if s, ok := c.store.(store.PayloadCodecStore); ok {
		return s.Payloads()
	}
	return nil
}

// ExportJob writes one job to dir/<id>: payload.json (j.Payload as it
// is), error.json (ExportedError) and metadata.json (ExportedMetadata),
// each written to a temporary file and renamed into place. Tools that
// fetch dead jobs some other way use it, or WriteExported with the files
// an export sent (the CLI over the API).
func ExportJob(dir string, j *Job) error {
	e, m := ExportedFiles(j)
	return WriteExported(dir, j.Payload, e, m)
}

// WriteExported writes one exported job to dir/<m.JobID>: payload as
// payload.json, e as error.json and m as metadata.json, as Export does.
// The CLI writes the lines of the API's NDJSON export with it, keeping
// a sealed payload and the metadata that says so.
func WriteExported(dir string, payload json.RawMessage, e ExportedError, m ExportedMetadata) error {
	root, err := openExportDir(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return exportFiles(root, ".", payload, e, m)
}

// openExportDir makes the export folder dir if it is missing (readable
// by its owner only: it holds payloads) and opens it as an os.Root, so
// that no symbolic link in it (one planted at a job's directory) leads
// a write out of it.
func openExportDir(dir string) (*os.Root, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return os.OpenRoot(dir)
}

// exportFS is what an export writes through: an *os.Root, which no
// symbolic link leads out of.
type exportFS interface {
	MkdirAll(name string, perm os.FileMode) error
	OpenFile(name string, flag int, perm os.FileMode) (*os.File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
}

// exportTarget is where an export operation writes: under its Root, if
// it has one, else in the folder Dir, each through an os.Root (done
// closes it).
func exportTarget(p store.OperationParams) (fsys exportFS, dir string, done func(), err error) {
	if p.Root == "" {
		root, err := openExportDir(p.Dir)
		if err != nil {
			return nil, "", nil, fmt.Errorf("the export folder: %w", err)
		}
		return root, ".", func() { _ = root.Close() }, nil
	}
	rel, err := rootRelative(p.Root, p.Dir)
	if err != nil {
		return nil, "", nil, err
	}
	// The export folder itself is the operator's: it is made if missing.
	if err := os.MkdirAll(p.Root, 0o700); err != nil {
		return nil, "", nil, fmt.Errorf("the export folder: %w", err)
	}
	root, err := os.OpenRoot(p.Root)
	if err != nil {
		return nil, "", nil, fmt.Errorf("the export folder: %w", err)
	}
	return root, rel, func() { _ = root.Close() }, nil
}

// rootRelative returns dir as a path relative to root, or an error when
// dir does not lie under root.
func rootRelative(root, dir string) (string, error) {
	rel, err := filepath.Rel(root, dir)
	if err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("the folder %q is not under the export folder %q", dir, root)
	}
	return rel, nil
}

func exportFiles(fsys exportFS, dir string, p json.RawMessage, e ExportedError, m ExportedMetadata) error {
	if m.JobID <= 0 {
		return fmt.Errorf("%w: job id %d", ErrInvalid, m.JobID)
	}
	// Owner only: the files hold payloads, in plaintext for a queue not
	// encrypted or with decrypt, secrets included.
	jd := filepath.Join(dir, strconv.FormatInt(m.JobID, 10))
	if err := fsys.MkdirAll(jd, 0o700); err != nil {
		return err
	}
	payload := []byte(p)
	if b, err := json.MarshalIndent(p, "", "  "); err == nil {
		payload = b
	}
	eb, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return errors.Join(
		writeFileAtomic(fsys, filepath.Join(jd, "payload.json"), append(payload, '\n')),
		writeFileAtomic(fsys, filepath.Join(jd, "error.json"), append(eb, '\n')),
		writeFileAtomic(fsys, filepath.Join(jd, "metadata.json"), append(mb, '\n')),
	)
}

// ExportedFiles returns what an export writes to error.json and
// metadata.json for the job j, taking j.Payload as plaintext
// (Client.Exported adds what sealing the payload says).
func ExportedFiles(j *Job) (ExportedError, ExportedMetadata) {
	e := ExportedError{JobID: j.ID, Attempts: j.Attempt, RetryCount: j.RetryCount, LastError: j.LastError,
		Class: j.LastErrorClass.String(), Reason: j.DeadReason, Fingerprint: j.Fingerprint, FailedAt: j.LastFailedAt,
		DeadAt: j.DeadAt, History: j.History}
	m := ExportedMetadata{JobID: j.ID, Queue: j.Queue, Kind: j.Kind, CreatedAt: j.CreatedAt, IdempotencyKey: j.IdempotencyKey,
		Dependency: j.Dependency, Reprocessable: j.Reprocessable, Redriven: j.Redriven, MaxRetries: j.MaxRetries}
	return e, m
}

// writeFileAtomic writes data to path through a new temporary file
// renamed into place. Whatever was at the temporary name (the rest of an
// export cut short, or a link someone put there, which would carry the
// data to a file elsewhere) is removed, never written through: the file
// is created new (O_EXCL), and one that reappears fails the write.
func writeFileAtomic(fsys exportFS, path string, data []byte) error {
	tmp := path + ".tmp"
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return fsys.Rename(tmp, path)
}
