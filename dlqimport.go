package redrive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
)

// MaxExportedFile bounds, in bytes, each file of an exported job an
// import reads (payload.json, error.json, metadata.json).
const MaxExportedFile = 64 << 20

// importBatch is how many dead jobs an import adds in one AddDead.
const importBatch = 100

// ImportResult counts what Client.Import did.
type ImportResult struct {
	// Imported is how many dead jobs were added.
	Imported int `json:"imported"`
	// Existing is how many were not added because their idempotency key
	// was already taken (the job, or a copy, is in the store already).
	Existing int `json:"existing"`
	// Sealed is how many of those added kept a sealed payload.
	Sealed int `json:"sealed"`
	// Undecryptable is how many of those added hold a payload the store
	// cannot open (its key is not configured, or it is not the key that
	// sealed it): they are kept sealed and read as undecryptable until
	// the key is configured.
	Undecryptable int `json:"undecryptable"`
}

// Import adds the dead jobs of an export folder (the layout Export and
// the folder export operation write: one directory per job named by its
// id, holding payload.json, error.json and metadata.json) to the store,
// as dead jobs with their history, errors and counts (AddDead): list,
// redrive, purge and export them as any dead job. Entries of dir that
// are not directories named by a job id are left out.
//
// Every job's files are read and checked first: a folder missing a
// file or holding one that is not what an export writes fails the
// import, naming it, before anything is added; so does a sealed payload
// that the store's key of its id does not open (altered, moved to
// another queue, or sealed by another key of the same id). A sealed payload
// (metadata.json's payload_sealed) is kept as it is, bound to the job's
// queue: the store opens it when its key is configured, and reads it as
// undecryptable otherwise (nothing is lost; configure the key and
// redrive). A plaintext payload is sealed by the store as any new
// payload of its queue. An import is idempotent: a job with an
// idempotency key is added once (an import run again, or into the store
// the export came from, adds those jobs that are no longer there, and
// counts the others as Existing); a job without one is given the key
// ImportKeyPrefix followed by a digest of its exported id, queue, kind,
// creation and death times, so that an import run again skips it as
// well (the first import into the store it came from adds a copy, keyed
// so). It returns what it did, and on an error what it had added by
// then.
func (c *Client) Import(ctx context.Context, dir string, progress func(n int)) (ImportResult, error) {
	var res ImportResult
	if dir == "" {
		return res, fmt.Errorf("redrive: import: %w: empty directory", ErrInvalid)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return res, fmt.Errorf("redrive: import: %w", err)
	}
	defer root.Close()
	codec := c.payloadCodec()
	ids, err := exportedIDs(root)
	if err != nil {
		return res, fmt.Errorf("redrive: import: %s: %w", dir, err)
	}
	// First every job is read and checked, so that a bad folder adds
	// nothing; then they are read again and added in batches (memory
	// stays bounded whatever the export's size).
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("redrive: import: %w", err)
		}
		if _, err := readExported(root, id, codec); err != nil {
			return res, fmt.Errorf("redrive: import: %w", err)
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), importBatch)
		batch := make([]store.DeadJob, 0, n)
		for _, id := range ids[:n] {
			d, err := readExported(root, id, codec)
			if err != nil {
				return res, fmt.Errorf("redrive: import: %w", err)
			}
			batch = append(batch, d)
		}
		ids = ids[n:]
		jobs, err := c.store.AddDead(ctx, batch, c.now())
		if err != nil {
			return res, fmt.Errorf("redrive: import: %w", err)
		}
		for i, j := range jobs {
			switch {
			case j.Existing:
				res.Existing++
			default:
				res.Imported++
				if batch[i].Sealed {
					res.Sealed++
				}
				if j.PayloadError != "" {
					res.Undecryptable++
				}
			}
		}
		if progress != nil {
			progress(res.Imported + res.Existing)
		}
	}
	return res, nil
}

// exportedIDs returns the ids of the job directories under root, in
// ascending order.
func exportedIDs(root *os.Root) ([]int64, error) {
	f, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, e := range entries {
		id, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || id <= 0 || strconv.FormatInt(id, 10) != e.Name() || !e.IsDir() {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// readExported reads and parses the files of the exported job id. A
// sealed payload under a key id codec holds must open with it.
func readExported(root *os.Root, id int64, codec store.PayloadCodec) (store.DeadJob, error) {
	name := strconv.FormatInt(id, 10)
	var files [3][]byte
	for i, f := range []string{"payload.json", "error.json", "metadata.json"} {
		b, err := readBounded(root, name+"/"+f)
		if err != nil {
			return store.DeadJob{}, fmt.Errorf("job folder %s: %w", name, err)
		}
		files[i] = b
	}
	d, m, err := ParseExported(files[0], files[1], files[2])
	if err != nil {
		return store.DeadJob{}, fmt.Errorf("job folder %s: %w", name, err)
	}
	if m.JobID != id {
		return store.DeadJob{}, fmt.Errorf("job folder %s: metadata.json is of job %d", name, m.JobID)
	}
	if d.IdempotencyKey == "" {
		d.IdempotencyKey = importKey(m, d)
	}
	if d.Sealed && codec != nil {
		// A key the store lacks is not a reason to refuse: the job is
		// kept until it is configured. A key it has must open it.
		if _, err := codec.Open(d.Queue, d.Payload); err != nil && !errors.Is(err, seal.ErrUnknownKey) {
			return store.DeadJob{}, fmt.Errorf("job folder %s: %w: payload.json is sealed under key %q and does not open for queue %q "+
				"with the store's key of that id: it was altered, metadata.json's queue was changed, or another key of the same id sealed it",
				name, ErrInvalid, m.PayloadSealed, d.Queue)
		}
	}
	return d, nil
}

// ImportKeyPrefix begins the idempotency key an import gives an exported
// job that has none (see Client.Import).
const ImportKeyPrefix = "redrive-import:"

// importKey is the idempotency key of an exported dead job without one:
// a digest of what names that death of that job (its id in the store it
// was exported from, queue, kind, creation and death times), so that the
// same dead letter imported again is not added twice, while another
// death of the same job, or a job of the same id from another store, is.
func importKey(m ExportedMetadata, d store.DeadJob) string {
	h := sha256.New()
	created := d.CreatedAt
	if created.IsZero() {
		created = d.DeadAt
	}
	fmt.Fprintf(h, "%d\x00%s\x00%s\x00%s\x00%s", m.JobID, d.Queue, d.Kind,
		created.UTC().Format(time.RFC3339Nano), d.DeadAt.UTC().Format(time.RFC3339Nano))
	return ImportKeyPrefix + hex.EncodeToString(h.Sum(nil))[:32]
}

// readBounded reads the file name under root, refusing one larger than
// MaxExportedFile.
func readBounded(root *os.Root, name string) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s is missing", path.Base(name))
		}
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxExportedFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxExportedFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, MaxExportedFile)
	}
	return b, nil
}

// ParseExported reads the three files of one exported job (payload.json,
// error.json and metadata.json, as an export writes them) into the dead
// job an import adds, with the metadata read. It refuses, saying why,
// files that are not what an export writes: invalid JSON, unknown
// fields, data after the value, job ids that differ, an unknown failure
// class, no death time, negative counts, an empty queue or kind, and a
// payload marked sealed (payload_sealed) that is not an envelope under
// that key, or a sealed envelope not marked so. A sealed payload is
// kept as it is (DeadJob.Sealed); a plaintext one is compacted (the
// export indents it).
func ParseExported(payload, errorJSON, metadataJSON []byte) (store.DeadJob, ExportedMetadata, error) {
	var (
		e ExportedError
		m ExportedMetadata
	)
	if err := decodeExported(metadataJSON, &m); err != nil {
		return store.DeadJob{}, m, fmt.Errorf("metadata.json: %w", err)
	}
	if err := decodeExported(errorJSON, &e); err != nil {
		return store.DeadJob{}, m, fmt.Errorf("error.json: %w", err)
	}
	fail := func(format string, args ...any) (store.DeadJob, ExportedMetadata, error) {
		return store.DeadJob{}, m, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	switch {
	case m.JobID <= 0:
		return fail("metadata.json: job_id %d is not a job id", m.JobID)
	case e.JobID != m.JobID:
		return fail("error.json is of job %d, metadata.json of job %d", e.JobID, m.JobID)
	case m.Queue == "" || m.Kind == "":
		return fail("metadata.json: queue and kind are required")
	case e.DeadAt == nil || e.DeadAt.IsZero():
		return fail("error.json: dead_at is missing")
	case e.Attempts < 0 || m.Redriven < 0:
		return fail("negative attempts or redriven")
	}
	var class failure.Class
	if err := class.UnmarshalText([]byte(e.Class)); err != nil {
		return fail("error.json: class: %v", err)
	}
	p := bytes.TrimSpace(payload)
	if !json.Valid(p) {
		return fail("payload.json is not JSON")
	}
	d := store.DeadJob{Queue: m.Queue, Kind: m.Kind, IdempotencyKey: m.IdempotencyKey, Dependency: m.Dependency,
		MaxRetries: m.MaxRetries, NotReprocessable: !m.Reprocessable, CreatedAt: m.CreatedAt, DeadAt: *e.DeadAt,
		Attempt: e.Attempts, Redriven: m.Redriven, DeadReason: e.Reason, LastError: e.LastError,
		LastErrorClass: class, Fingerprint: e.Fingerprint, History: e.History}
	if m.PayloadSealed != "" {
		if id, ok := seal.KeyID(p); !ok || id != m.PayloadSealed {
			return fail("metadata.json says payload.json is sealed under key %q, and it is not", m.PayloadSealed)
		}
		d.Payload, d.Sealed = json.RawMessage(p), true
		return d, m, nil
	}
	if id, ok := seal.KeyID(p); ok || seal.IsSealed(p) {
		// An export marks every payload it seals (and seals a plaintext
		// that looks like an envelope): taken as plaintext, the
		// envelope would become the job's payload.
		return fail("payload.json is a sealed envelope (key %q) and metadata.json does not say so (payload_sealed)", id)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, p); err != nil {
		return fail("payload.json: %v", err)
	}
	d.Payload = buf.Bytes()
	return d, m, nil
}

// decodeExported decodes one JSON file of an export into v, refusing
// unknown fields and anything after the value. (internal/strictjson's
// tests import this package: it cannot be used here.)
func decodeExported(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}
