package postgres

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// fuzzRow splits data into the values of a job row (and its history):
// each value is a length byte (255: NULL) and that many bytes, cut short
// at the end of data.
func fuzzRow(data []byte) [][]byte {
	vals := make([][]byte, len(jobOIDs)+1)
	for i := range vals {
		if len(data) == 0 {
			vals[i] = nil
			continue
		}
		n := int(data[0])
		data = data[1:]
		if n == 255 {
			continue
		}
		n = min(n, len(data))
		vals[i], data = data[:n], data[n:]
	}
	return vals
}

// fuzzEncode frames vals as fuzzRow reads them.
func fuzzEncode(vals [][]byte) []byte {
	var out []byte
	for _, v := range vals {
		if v == nil {
			out = append(out, 255)
			continue
		}
		out = append(out, byte(len(v)))
		out = append(out, v...)
	}
	return out
}

// validRow is the binary row of a fresh job, with its history.
func validRow() [][]byte {
	i8 := func(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	i4 := func(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	ts := i8(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Sub(pgEpoch).Microseconds())
	vals := [][]byte{i8(7), []byte("q"), []byte("kind"), []byte(`{"n":1}`), []byte("running"), i4(1), i4(-1),
		nil, nil, []byte(""), {1}, ts, ts, ts, nil, ts, []byte("w"), {0}, i4(0), []byte(""), []byte(""),
		nil, nil, []byte(""), []byte(""), i4(0), nil, nil, nil, nil, nil, nil, i8(1), {0xff, 0xfd}, []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), nil,
		append([]byte{1}, `[]`...)}
	return vals
}

// pgxTime is what pgx's scan (which Get uses) reads from the binary
// timestamptz value v, in UTC as scan returns it.
func pgxTime(v []byte) (time.Time, error) {
	var t time.Time
	err := pgtype.NewMap().Scan(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, v, &t)
	return t.UTC(), err
}

// sameTime fails t unless the raw decoder's time of v, and whether it
// read one, is what pgx's scan makes of v.
func sameTime(t *testing.T, what string, v []byte, got time.Time, ok bool) {
	t.Helper()
	want, err := pgxTime(v)
	switch {
	case ok != (err == nil):
		t.Fatalf("%s %x: raw decoder ok %v, pgx's scan error %v", what, v, ok, err)
	case ok && (!got.Equal(want) || got != want):
		t.Fatalf("%s %x: raw decoder %v, pgx's scan %v", what, v, got, want)
	}
}

// timeSeeds are microseconds from 2000 at the edges of the ranges that
// matter: a time.Duration's (~292 years), PostgreSQL's timestamptz
// (4713 BC to 294276 AD), int64's and the infinities.
var timeSeeds = []int64{0, 1, -1, 999_999, -999_999, 1_000_001, -1_000_001,
	int64(math.MaxInt64/time.Microsecond) + 1, int64(math.MinInt64/time.Microsecond) - 1, // a Duration's edges
	usFrom2000(time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)), usFrom2000(time.Date(1650, 1, 1, 0, 0, 0, 0, time.UTC)),
	-211_813_488_000_000_000,      // 4714-11-24 BC, PostgreSQL's lowest
	9_223_371_331_200_000_000 - 1, // 294276-12-31 23:59:59.999999, its highest
	math.MaxInt64 - 1, math.MinInt64 + 1, math.MaxInt64, math.MinInt64}

// usFrom2000 is t in microseconds since pgEpoch, as PostgreSQL sends it.
func usFrom2000(t time.Time) int64 {
	return (t.Unix()-pgEpochUnix)*1_000_000 + int64(t.Nanosecond()/1000)
}

// FuzzDecodeTime: the raw decoder reads every 8-byte timestamptz as pgx's
// scan does (so List and Fetch agree with Get), over the whole range,
// and refuses the infinities, which pgx's scan cannot put in a time.Time
// either.
func FuzzDecodeTime(f *testing.F) {
	for _, us := range timeSeeds {
		f.Add(us)
	}
	f.Fuzz(func(t *testing.T, us int64) {
		v := binary.BigEndian.AppendUint64(nil, uint64(us))
		r := rawReader{vals: [][]byte{v}}
		got := r.time(0)
		sameTime(t, "timestamptz", v, got, r.bad == 0)
	})
}

// FuzzDecodeRaw: decodeRaw reads any bytes without panicking; rejects
// values of the wrong width, NULLs in columns that hold none, infinite
// times and a bad jsonb version with an error naming the column; and
// reads every time of a row it accepts as pgx's scan does.
func FuzzDecodeRaw(f *testing.F) {
	f.Add(fuzzEncode(validRow()), true)
	f.Add(fuzzEncode(validRow()[:len(jobOIDs)]), false)
	f.Add([]byte{}, false)
	for _, us := range timeSeeds {
		row := validRow()
		row[12] = binary.BigEndian.AppendUint64(nil, uint64(us))
		f.Add(fuzzEncode(row), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, withHistory bool) {
		sc := newJobScan(withHistory, nil)
		vals := fuzzRow(data)
		if !withHistory {
			vals = vals[:len(jobOIDs)]
		}
		j, err := sc.decodeRaw(vals, true)
		if err == nil && j == nil {
			t.Fatal("decodeRaw returned neither a job nor an error")
		}
		if err != nil {
			return
		}
		times := map[string]*time.Time{"created_at": &j.CreatedAt, "run_at": &j.RunAt, "attempted_at": j.AttemptedAt,
			"finished_at": j.FinishedAt, "lease_until": j.LeaseUntil, "last_failed_at": j.LastFailedAt, "dead_at": j.DeadAt}
		if j.Progress != nil && vals[30] != nil {
			times["progress_at"] = &j.Progress.At
		}
		checked := 0
		for i, oid := range jobOIDs {
			if oid != pgtype.TimestamptzOID || vals[i] == nil {
				continue
			}
			got, ok := times[jobColumns[i]]
			if !ok {
				continue // progress_at without progress_done: not read
			}
			sameTime(t, jobColumns[i], vals[i], *got, true)
			checked++
		}
		if checked < 2 {
			t.Fatalf("%d times compared, want at least created_at and run_at", checked)
		}
	})
}

// TestDecodeRawValid: the valid row decodes; each fixed-width column cut
// short, and a NULL where none may be, is an error.
func TestDecodeRawValid(t *testing.T) {
	sc := newJobScan(true, nil)
	j, err := sc.decodeRaw(validRow(), true)
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != 7 || j.Queue != "q" || j.Attempt != 1 || j.MaxRetries != -1 || !j.Reprocessable || j.Worker != "w" ||
		j.RunAt != time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) || j.FinishedAt != nil || j.History == nil || j.Priority != -3 ||
		j.Trace != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("decoded %+v", *j)
	}
	for i, oid := range jobOIDs {
		row := validRow()
		switch {
		case row[i] == nil:
			continue
		case len(row[i]) > 0 && oid != pgtype.TextOID && oid != pgtype.ByteaOID: // fixed width: cut short
			row[i] = row[i][:len(row[i])-1]
		default: // text or bytea: NULL where the column holds none
			if jobNullable[i] {
				continue
			}
			row[i] = nil
		}
		if _, err := sc.decodeRaw(row, true); err == nil {
			t.Errorf("column %s: %q decoded without an error", jobColumns[i], row[i])
		}
	}
	// The trace context packed (migration 0037) reads as its text; a
	// packed form that does not unpack as none.
	row := validRow()
	row[34], row[35] = nil, []byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c,
		0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31, 0x01}
	if j, err := sc.decodeRaw(row, true); err != nil {
		t.Errorf("packed trace context: %v", err)
	} else if j.Trace != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("packed trace context read as %q", j.Trace)
	}
	row[35] = []byte{1, 2}
	if j, err := sc.decodeRaw(row, true); err != nil {
		t.Errorf("corrupt packed trace context: %v", err)
	} else if j.Trace != "" {
		t.Errorf("corrupt packed trace context read as %q, want none", j.Trace)
	}
	row = validRow()
	row[len(jobOIDs)] = []byte(`[]`) // text jsonb read as binary
	if _, err := sc.decodeRaw(row, true); err == nil {
		t.Error("a jsonb history without its version byte decoded as binary without an error")
	}
	row = validRow()
	row[12] = binary.BigEndian.AppendUint64(nil, 1<<63-1) // infinity
	if _, err := sc.decodeRaw(row, true); err == nil {
		t.Error("an infinite run_at decoded without an error")
	}
}
