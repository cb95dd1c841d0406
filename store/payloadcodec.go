package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/redrivehq/redrive/internal/seal"
)

// PayloadCodec encrypts job payloads at rest (seal.Policy is the one
// redrive provides). A store given one seals every payload it writes
// (Enqueue, AddDead, a redrive's new payload) and opens every payload it
// reads, so that callers only ever see plaintext and the database only
// ever holds what Seal returned. It must be safe for concurrent use.
type PayloadCodec interface {
	// Seal returns the form of payload to keep for a job of queue: a
	// sealed envelope, or payload itself for a queue not encrypted.
	Seal(queue string, payload []byte) ([]byte, error)
	// Open returns the plaintext of a stored payload of a job of queue;
	// a payload that is not sealed comes back as it is.
	Open(queue string, stored []byte) ([]byte, error)
}

// ReasonUndecryptable is the dead reason of a job whose payload could not
// be opened, and the prefix of Job.PayloadError.
const ReasonUndecryptable = "undecryptable"

// SealNew returns jobs with their payloads sealed by c for their queues:
// jobs itself when c is nil.
func SealNew(c PayloadCodec, jobs []NewJob) ([]NewJob, error) {
	return sealAll(c, jobs, "job", func(j *NewJob) (string, *json.RawMessage) { return j.Queue, &j.Payload })
}

// SealDead is SealNew for dead jobs. A job with Sealed keeps its
// payload as given, with or without c; one whose payload is not a
// sealed envelope is refused (ErrInvalid). The previous payloads its
// history keeps (Event.PreviousPayload, brought by an import) are
// sealed as its payload would be, those already sealed kept.
func SealDead(c PayloadCodec, jobs []DeadJob) ([]DeadJob, error) {
	for i := range jobs {
		if jobs[i].Sealed {
			if _, ok := seal.KeyID(jobs[i].Payload); !ok {
				return nil, fmt.Errorf("dead job %d of %d: %w: the payload is marked sealed but is not a sealed envelope (\"rdenc:<key id>:...\")", i+1, len(jobs), ErrInvalid)
			}
		}
	}
	out, err := sealAll(c, jobs, "dead job", func(j *DeadJob) (string, *json.RawMessage) {
		if j.Sealed {
			return j.Queue, nil
		}
		return j.Queue, &j.Payload
	})
	if err != nil || c == nil {
		return out, err
	}
	for i := range out {
		h := out[i].History
		for k := range h {
			prev := h[k].PreviousPayload
			if prev == "" || seal.IsSealed([]byte(prev)) {
				continue
			}
			b, err := c.Seal(out[i].Queue, []byte(prev))
			if err != nil {
				return nil, fmt.Errorf("dead job %d of %d: seal the previous payload of its history: %w", i+1, len(jobs), err)
			}
			if string(b) == prev {
				continue // a queue not sealed
			}
			if &h[0] == &jobs[i].History[0] {
				h = slices.Clone(h) // the caller's history is left as given
				out[i].History = h
			}
			h[k].PreviousPayload = string(b)
		}
	}
	return out, nil
}

// sealAll returns a copy of items with the payload each names (its
// queue, and where its payload is: nil for one kept as it is) sealed by
// c, an empty one as null; items itself when c is nil. what names an
// item in errors.
func sealAll[T any](c PayloadCodec, items []T, what string, payload func(*T) (string, *json.RawMessage)) ([]T, error) {
	if c == nil {
		return items, nil
	}
	out := make([]T, len(items))
	for i := range items {
		out[i] = items[i]
		queue, p := payload(&out[i])
		if p == nil {
			continue
		}
		if len(*p) == 0 {
			*p = json.RawMessage("null")
		}
		b, err := c.Seal(queue, *p)
		if err != nil {
			return nil, fmt.Errorf("%s %d of %d: seal payload: %w", what, i+1, len(items), err)
		}
		*p = b
	}
	return out, nil
}

// PlainPayloads puts back, in the jobs a store's Enqueue or AddDead
// returns, the plaintext payloads of the jobs given (plain[i] is the
// payload of out[i]): out[i] inserted holds what the store wrote.
// Jobs returned with Existing were read, and opened, by the store.
func PlainPayloads(out []*Job, plain func(i int) json.RawMessage) {
	for i, j := range out {
		if j == nil || j.Existing {
			continue
		}
		p := plain(i)
		if len(p) == 0 {
			p = json.RawMessage("null")
		}
		j.Payload = p
	}
}

// SealResults returns outcomes with the result of each (Outcome.Result,
// what a handler recorded with SetResult) sealed by c for its job's
// queue, as payloads are: outcomes itself when c is nil or none has a
// result.
func SealResults(c PayloadCodec, outcomes []Outcome) ([]Outcome, error) {
	if c == nil {
		return outcomes, nil
	}
	var out []Outcome
	for i := range outcomes {
		if len(outcomes[i].Result) == 0 {
			continue
		}
		b, err := c.Seal(outcomes[i].Queue, outcomes[i].Result)
		if err != nil {
			return nil, fmt.Errorf("outcome %d (job %d): seal result: %w", i, outcomes[i].JobID, err)
		}
		if out == nil {
			out = slices.Clone(outcomes)
		}
		out[i].Result = b
	}
	if out == nil {
		return outcomes, nil
	}
	return out, nil
}

// OpenResult opens in place, with c, the result r holds as stored for a
// job of queue. One that cannot be opened leaves Result nil and sets
// ResultError ("undecryptable: ..."), as OpenJob does for a payload.
func OpenResult(c PayloadCodec, queue string, r *DependencyResult) {
	r.Result, r.ResultError = openResult(c, queue, r.Result)
}

// OpenJobResult sets j's Result to stored, the result a store read for
// it, opened with c (nil or empty stored: none); one that cannot be
// opened leaves Result nil and sets ResultError, as OpenResult does.
func OpenJobResult(c PayloadCodec, j *Job, stored []byte) {
	if len(stored) == 0 {
		j.Result, j.ResultError = nil, ""
		return
	}
	j.Result, j.ResultError = openResult(c, j.Queue, stored)
}

// openResult opens a result stored for a job of queue: the result, or
// nil and why it cannot be opened.
func openResult(c PayloadCodec, queue string, stored []byte) (json.RawMessage, string) {
	if !seal.IsSealed(stored) {
		return stored, ""
	}
	var (
		p   []byte
		err error
	)
	if c == nil {
		id, _ := seal.KeyID(stored)
		err = fmt.Errorf("%w %q: the store has no payload keys", seal.ErrUnknownKey, id)
	} else {
		p, err = c.Open(queue, stored)
	}
	if err != nil {
		return nil, ReasonUndecryptable + ": " + err.Error()
	}
	return p, ""
}

// RekeyResult re-seals with c, under the current key, a result stored
// for a job of queue that is sealed under another key (changed true);
// any other result is left.
func RekeyResult(c PayloadCodec, queue string, stored []byte) (out []byte, changed bool, err error) {
	r, ok := c.(PayloadRekeyer)
	if !ok {
		return nil, false, ErrNoPayloadKeys
	}
	if !seal.IsSealed(stored) {
		return stored, false, nil
	}
	out, changed, err = r.Reseal(queue, stored)
	if err != nil {
		return stored, false, nil // it does not open: left as it is
	}
	return out, changed, nil
}

// OpenJob opens the stored payload of j (as read from the database) in
// place with c. A payload that cannot be opened, or a sealed payload read
// without a codec, leaves Payload null and sets PayloadError: reads show
// the job, and a worker makes it dead, rather than failing.
func OpenJob(c PayloadCodec, j *Job) {
	if j == nil || !seal.IsSealed(j.Payload) {
		return
	}
	j.PayloadKey, _ = seal.KeyID(j.Payload)
	var (
		p   []byte
		err error
	)
	if c == nil {
		id, _ := seal.KeyID(j.Payload)
		err = fmt.Errorf("%w %q: the store has no payload keys", seal.ErrUnknownKey, id)
	} else {
		p, err = c.Open(j.Queue, j.Payload)
	}
	if err != nil {
		j.SealedPayload = j.Payload
		j.Payload = nil
		j.PayloadError = ReasonUndecryptable + ": " + err.Error()
		return
	}
	j.Payload = p
}

// PayloadCodecStore is implemented by the stores that seal payloads
// (both stores of redrive): a DLQ export seals with the codec of the
// store it reads (ExportPayload).
type PayloadCodecStore interface {
	// Payloads returns the store's codec, nil when it has none.
	Payloads() PayloadCodec
}

// ExportSealer is a PayloadCodec that seals DLQ exports (seal.Policy is
// one).
type ExportSealer interface {
	PayloadCodec
	// SealExport returns payload, the plaintext of a job of queue,
	// sealed under the current key when the queue is sealed or stored
	// is set (the payload was stored sealed), with the key's id;
	// payload itself and "" when neither, or without keys.
	SealExport(queue string, payload []byte, stored bool) (out []byte, key string, err error)
}

// ExportPayload returns the payload of j, a job as a store read it with
// c, in the form a DLQ export writes it, and the id of the key that form
// is sealed under ("" for plaintext):
//   - a payload the store could not open (PayloadError): the stored
//     envelope as it is, so that nothing is lost;
//   - decrypt: the plaintext;
//   - otherwise, when c has keys and j's queue is sealed or its payload
//     was stored sealed: the plaintext sealed again under the current
//     key, bound to j's queue (an import must keep the job in its
//     queue); the plaintext when neither.
func ExportPayload(c PayloadCodec, j *Job, decrypt bool) (json.RawMessage, string, error) {
	if len(j.SealedPayload) > 0 {
		id, _ := seal.KeyID(j.SealedPayload)
		return j.SealedPayload, id, nil
	}
	p := j.Payload
	if len(p) == 0 {
		p = json.RawMessage("null")
	}
	es, ok := c.(ExportSealer)
	if decrypt || !ok {
		return p, "", nil
	}
	out, key, err := es.SealExport(j.Queue, p, j.PayloadKey != "")
	if err != nil {
		return nil, "", fmt.Errorf("job %d: seal payload: %w", j.ID, err)
	}
	return out, key, nil
}

// SealPayload seals one payload of a job of queue with c (nil: payload
// itself); an empty payload stays empty.
func SealPayload(c PayloadCodec, queue string, payload []byte) ([]byte, error) {
	if c == nil || len(payload) == 0 {
		return payload, nil
	}
	b, err := c.Seal(queue, payload)
	if err != nil {
		return nil, fmt.Errorf("seal payload: %w", err)
	}
	return b, nil
}

// OperationQueue is the queue name an operation's new payload
// (OperationParams.Payload) is sealed for while the operation is stored:
// no job's queue (a queue's name holds no '/'), so it opens only as an
// operation's. A codec seals it whenever it has keys.
const OperationQueue = "/operation"

// OpenOperation opens the sealed payload of op's params in place with
// c. One that cannot be opened stays sealed, and PayloadCheck refuses
// it when the operation runs.
func OpenOperation(c PayloadCodec, op *Operation) {
	if op == nil || c == nil || !seal.IsSealed(op.Params.Payload) {
		return
	}
	if p, err := c.Open(OperationQueue, op.Params.Payload); err == nil {
		op.Params.Payload = p
	}
}

// ErrUndecryptable is the error of a redrive operation whose new payload
// is stored sealed under a key the store does not have.
var ErrUndecryptable = errors.New("the operation's payload is undecryptable: its key is not configured")

// CheckOperationPayload returns ErrUndecryptable for an operation read
// with a payload still sealed (OpenOperation could not open it).
func CheckOperationPayload(op *Operation) error {
	if seal.IsSealed(op.Params.Payload) {
		return fmt.Errorf("operation %s: %w", op.ID, ErrUndecryptable)
	}
	return nil
}

// PayloadRekeyer is a PayloadCodec that rotates keys (seal.Policy is
// one): a rekey operation (OpRekey) re-seals with it.
type PayloadRekeyer interface {
	PayloadCodec
	// Reseal returns stored, a payload of a job of queue sealed under
	// another key than the current one, sealed under the current key,
	// and changed true. A payload not sealed, or sealed under the current
	// key, is left (changed false); one that does not open is an error.
	Reseal(queue string, stored []byte) (out []byte, changed bool, err error)
}

// ErrNoPayloadKeys is the error of a rekey step on a store without
// payload keys.
var ErrNoPayloadKeys = errors.New("the store has no payload keys (a rekey needs them)")

// Rekey re-seals the payloads of a rekey step's rows with c: it returns
// the rows that changed (their index in rows and new payload) and
// counts the outcomes in h (Rekeyed: changed, Skipped: left, Failed:
// undecryptable).
func Rekey(c PayloadCodec, queues []string, payloads [][]byte, h *OperationProgress) (idx []int, out [][]byte, err error) {
	r, ok := c.(PayloadRekeyer)
	if !ok {
		return nil, nil, ErrNoPayloadKeys
	}
	for i, p := range payloads {
		np, changed, err := r.Reseal(queues[i], p)
		switch {
		case err != nil:
			h.Failed++
		case changed:
			h.Rekeyed++
			idx = append(idx, i)
			out = append(out, np)
		default:
			h.Skipped++
		}
	}
	return idx, out, nil
}

// PayloadKeyCounter is implemented by the stores that count their stored
// payloads by the key they are sealed under (both stores of redrive).
type PayloadKeyCounter interface {
	// PayloadKeyCounts returns how many jobs hold a payload sealed under
	// each key id; "" counts the payloads not sealed.
	PayloadKeyCounts(ctx context.Context) (map[string]int64, error)
}

// RekeyHistory re-seals with c, under the current key, the previous
// payloads (Event.PreviousPayload: what an edited redrive replaced) of
// history, the JSON array of a job of queue's events, that are sealed
// under another key. It returns the new history and changed true when
// one was re-sealed; the other events, and every other field, are kept
// as they were. A previous payload that does not open (its key is gone,
// or it was cut at MaxPreviousPayload characters) is left as it is.
func RekeyHistory(c PayloadCodec, queue string, history []byte) (out []byte, changed bool, err error) {
	r, ok := c.(PayloadRekeyer)
	if !ok {
		return nil, false, ErrNoPayloadKeys
	}
	if !bytes.Contains(history, []byte("rdenc:")) {
		return history, false, nil
	}
	var events []map[string]json.RawMessage
	if err := json.Unmarshal(history, &events); err != nil {
		return nil, false, fmt.Errorf("history: %w", err)
	}
	for _, ev := range events {
		raw, ok := ev["previous_payload"]
		if !ok {
			continue
		}
		var prev string
		if err := json.Unmarshal(raw, &prev); err != nil || !seal.IsSealed([]byte(prev)) {
			continue
		}
		np, ch, err := r.Reseal(queue, []byte(prev))
		if err != nil || !ch {
			continue
		}
		b, err := json.Marshal(string(np))
		if err != nil {
			return nil, false, err
		}
		ev["previous_payload"], changed = b, true
	}
	if !changed {
		return history, false, nil
	}
	out, err = json.Marshal(events)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// RekeyOperationParams re-seals with c, under the current key, the new
// payload a redrive operation keeps in params (the JSON of its
// OperationParams, its payload sealed for OperationQueue) when it is
// sealed under another key. changed is false, and params returned as it
// is, when there is nothing to re-seal or the payload does not open.
func RekeyOperationParams(c PayloadCodec, params []byte) (out []byte, changed bool, err error) {
	r, ok := c.(PayloadRekeyer)
	if !ok {
		return nil, false, ErrNoPayloadKeys
	}
	if !bytes.Contains(params, []byte("rdenc:")) {
		return params, false, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return nil, false, fmt.Errorf("operation params: %w", err)
	}
	p, ok := m["payload"]
	if !ok {
		return params, false, nil
	}
	np, ch, err := r.Reseal(OperationQueue, p)
	if err != nil || !ch {
		return params, false, nil
	}
	m["payload"] = np
	out, err = json.Marshal(m)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}
