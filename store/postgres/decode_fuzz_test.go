package postgres

import (
	"encoding/binary"
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
		nil, nil, []byte(""), []byte(""), i4(0), nil, nil, nil, nil, nil, nil, i8(1), append([]byte{1}, `[]`...)}
	return vals
}

// FuzzDecodeRaw: decodeRaw reads any bytes without panicking, and
// rejects values of the wrong width, NULLs in columns that hold none,
// infinite times and a bad jsonb version with an error naming the column.
func FuzzDecodeRaw(f *testing.F) {
	f.Add(fuzzEncode(validRow()), true)
	f.Add(fuzzEncode(validRow()[:len(jobOIDs)]), false)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, data []byte, withHistory bool) {
		sc := newJobScan(withHistory)
		vals := fuzzRow(data)
		if !withHistory {
			vals = vals[:len(jobOIDs)]
		}
		j, err := sc.decodeRaw(vals, true)
		if err == nil && j == nil {
			t.Fatal("decodeRaw returned neither a job nor an error")
		}
	})
}

// TestDecodeRawValid: the valid row decodes; each fixed-width column cut
// short, and a NULL where none may be, is an error.
func TestDecodeRawValid(t *testing.T) {
	sc := newJobScan(true)
	j, err := sc.decodeRaw(validRow(), true)
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != 7 || j.Queue != "q" || j.Attempt != 1 || j.MaxRetries != -1 || !j.Reprocessable || j.Worker != "w" ||
		j.RunAt != time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) || j.FinishedAt != nil || j.History == nil {
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
	row := validRow()
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
