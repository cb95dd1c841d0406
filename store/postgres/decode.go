package postgres

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/redrivehq/redrive/store"
)

// jobOIDs are the types of jobColumns, in order.
var jobOIDs = []uint32{
	pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID, pgtype.ByteaOID, pgtype.TextOID, pgtype.Int4OID, pgtype.Int4OID, // id .. max_retries
	pgtype.ByteaOID, pgtype.TextOID, pgtype.TextOID, pgtype.BoolOID, // policy .. reprocessable
	pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID, // created_at .. lease_until
	pgtype.TextOID, pgtype.BoolOID, pgtype.Int4OID, pgtype.TextOID, pgtype.TextOID, // worker .. last_error_class
	pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TextOID, pgtype.TextOID, pgtype.Int4OID, // last_failed_at .. redriven
	pgtype.Int8OID, pgtype.Int8OID, pgtype.Int8OID, pgtype.Int8OID, pgtype.TimestamptzOID, pgtype.Int8OID, // last_duration .. replay_of
	pgtype.Int8OID,  // lease
	pgtype.Int2OID,  // priority
	pgtype.TextOID,  // trace
	pgtype.ByteaOID, // trace_packed
}

// jobNullable marks the columns of jobColumns that may be NULL; every
// other one is NOT NULL in the table.
var jobNullable = func() []bool {
	null := make([]bool, len(jobColumns))
	for _, c := range []string{"policy", "idem_key", "attempted_at", "finished_at", "lease_until", "worker", "last_failed_at", "dead_at",
		"last_duration", "last_delay", "progress_done", "progress_total", "progress_at", "replay_of", "trace", "trace_packed"} {
		null[slices.Index(jobColumns, c)] = true
	}
	return null
}()

// rawLayout reports whether rows of these fields can be decoded by
// decodeRaw: the columns of jobColumns (and the history when
// withHistory), each of its type, in the format decodeRaw reads (pgx asks
// for text and jsonb in the text format, the others in the binary
// format; text is the same bytes in both), and whether the history comes
// in the binary format. Any other layout goes through pgx's scan.
func rawLayout(fields []pgconn.FieldDescription, withHistory bool) (ok, binaryHistory bool) {
	want := len(jobOIDs)
	if withHistory {
		want++
	}
	if len(fields) != want {
		return false, false
	}
	for i, f := range fields {
		if i == len(jobOIDs) {
			if f.DataTypeOID != pgtype.JSONBOID {
				return false, false
			}
			binaryHistory = f.Format == pgtype.BinaryFormatCode
			continue
		}
		if f.DataTypeOID != jobOIDs[i] || (f.Format != pgtype.BinaryFormatCode && f.DataTypeOID != pgtype.TextOID) {
			return false, false
		}
	}
	return true, binaryHistory
}

// rawDecode turns decodeRaw on; tests turn it off to compare it with
// pgx's scan.
var rawDecode = true

// errRawValue reports a column value decodeRaw cannot read.
var errRawValue = errors.New("unexpected binary value")

// pgEpoch is where PostgreSQL's binary timestamps count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// pgEpochUnix is pgEpoch in seconds since the Unix epoch.
var pgEpochUnix = pgEpoch.Unix()

// PostgreSQL's timestamptz range in microseconds from pgEpoch: from
// 4714-11-24 BC (pgMinTime) up to, not including, 294277-01-01
// (pgEndTime). A value outside it (the infinities among them) is refused,
// as pgx's scan refuses it.
const (
	pgMinTime = -211_813_488_000_000_000
	pgEndTime = 9_223_371_331_200_000_000
)

// rawReader decodes the binary values of one row, column by column, and
// remembers the first column it could not read.
type rawReader struct {
	vals [][]byte
	bad  int // 1 + the first bad column; 0 while none
}

func (r *rawReader) fail(i int) {
	if r.bad == 0 {
		r.bad = i + 1
	}
}

func (r *rawReader) null(i int) bool { return r.vals[i] == nil }

func (r *rawReader) int8(i int) int64 {
	if len(r.vals[i]) != 8 {
		r.fail(i)
		return 0
	}
	return int64(binary.BigEndian.Uint64(r.vals[i]))
}

func (r *rawReader) int4(i int) int {
	if len(r.vals[i]) != 4 {
		r.fail(i)
		return 0
	}
	return int(int32(binary.BigEndian.Uint32(r.vals[i])))
}

func (r *rawReader) int2(i int) int {
	if len(r.vals[i]) != 2 {
		r.fail(i)
		return 0
	}
	return int(int16(binary.BigEndian.Uint16(r.vals[i])))
}

func (r *rawReader) bool(i int) bool {
	if len(r.vals[i]) != 1 {
		r.fail(i)
		return false
	}
	return r.vals[i][0] != 0
}

// text returns a text column ("" for NULL).
func (r *rawReader) text(i int) string { return string(r.vals[i]) }

// bytes returns a copy of a bytea column (nil for NULL).
func (r *rawReader) bytes(i int) []byte {
	if r.vals[i] == nil {
		return nil
	}
	return append([]byte{}, r.vals[i]...)
}

func (r *rawReader) time(i int) time.Time {
	us := r.int8(i)
	if us < pgMinTime || us >= pgEndTime { // the infinities among them
		r.fail(i)
		return time.Time{}
	}
	// Seconds and the rest apart, as pgx does: a time.Duration of the
	// microseconds overflows ~292 years from 2000, and PostgreSQL's
	// timestamps run from 4713 BC to 294276 AD.
	return time.Unix(pgEpochUnix+us/1_000_000, us%1_000_000*1000).UTC()
}

func (r *rawReader) timePtr(i int) *time.Time {
	if r.null(i) {
		return nil
	}
	t := r.time(i)
	return &t
}

// decodeRaw reads one row of a layout rawLayout accepted into a new job,
// as scan does through pgx.
func (sc *jobScan) decodeRaw(vals [][]byte, binaryHistory bool) (*store.Job, error) {
	r := rawReader{vals: vals}
	for i := range jobOIDs {
		if r.null(i) && !jobNullable[i] {
			return nil, fmt.Errorf("postgres: column %s is NULL", jobColumns[i])
		}
	}
	j := &store.Job{
		ID:              r.int8(0),
		Queue:           r.text(1),
		Kind:            r.text(2),
		Payload:         json.RawMessage(r.bytes(3)),
		State:           store.State(r.text(4)),
		Attempt:         r.int4(5),
		MaxRetries:      r.int4(6),
		IdempotencyKey:  r.text(8),
		Dependency:      r.text(9),
		Reprocessable:   r.bool(10),
		CreatedAt:       r.time(11),
		RunAt:           r.time(12),
		AttemptedAt:     r.timePtr(13),
		FinishedAt:      r.timePtr(14),
		LeaseUntil:      r.timePtr(15),
		Worker:          r.text(16),
		CancelRequested: r.bool(17),
		RetryCount:      r.int4(18),
		LastError:       r.text(19),
		LastFailedAt:    r.timePtr(21),
		DeadAt:          r.timePtr(22),
		DeadReason:      r.text(23),
		Fingerprint:     r.text(24),
		Redriven:        r.int4(25),
		Lease:           r.int8(32),
		Priority:        r.int2(33),
	}
	if p := r.bytes(7); len(p) > 0 {
		j.Policy = json.RawMessage(p)
	}
	if !r.null(26) {
		j.LastDuration = store.Duration(r.int8(26))
	}
	if !r.null(27) {
		j.LastDelay = store.Duration(r.int8(27))
	}
	if !r.null(28) {
		j.Progress = &store.JobProgress{Done: r.int8(28)}
		if !r.null(29) {
			j.Progress.Total = r.int8(29)
		}
		if !r.null(30) {
			j.Progress.At = r.time(30)
		}
	}
	if !r.null(31) {
		j.ReplayOf = r.int8(31)
	}
	j.Trace = readTrace(r.text(34), r.vals[35]) // unpacked without a copy first
	var history []byte
	if sc.withHistory {
		history = vals[len(jobOIDs)]
		if binaryHistory {
			// jsonb's binary format: a version byte (1), then the text.
			if len(history) < 1 || history[0] != 1 {
				r.fail(len(jobOIDs))
			} else {
				history = history[1:]
			}
		}
	}
	if r.bad != 0 {
		return nil, fmt.Errorf("postgres: column %s: %w", columnName(r.bad-1), errRawValue)
	}
	if err := store.DecodeStored(j, r.text(20), history, sc.withHistory); err != nil {
		return nil, err
	}
	store.OpenJob(sc.payloads, j)
	return j, nil
}

// columnName names column i of a job row.
func columnName(i int) string {
	if i < len(jobColumns) {
		return jobColumns[i]
	}
	return "history"
}
