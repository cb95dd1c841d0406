package redrive_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// sealedExport exports one dead job of the sealed queue "sec" from a
// store with the key k1 (byte 1) and returns the folder and the job's
// directory in it.
func sealedExport(t *testing.T) (dir, job string) {
	t.Helper()
	ctx := context.Background()
	k1 := keyPolicy(t, "k1", 1)
	k1.All, k1.Queues = false, map[string]bool{"sec": true}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "src.db"), sqlite.Options{Logger: quietLogger(), Payloads: k1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	added, err := c.AddDead(ctx, []store.DeadJob{{Queue: "sec", Kind: "k", Payload: json.RawMessage(`{"token":"T0P-SECRET"}`),
		Attempt: 1, DeadAt: time.Now(), LastErrorClass: failure.Permanent, DeadReason: "bad"}})
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "export")
	if _, err := c.Export(ctx, dir, redrive.Filter{}, nil); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, strconv.FormatInt(added[0].ID, 10))
}

// importInto imports dir into a new store with codec c (nil: no keys)
// and returns its result, how many dead jobs the store then holds, and
// the import's error.
func importInto(t *testing.T, c store.PayloadCodec, dir string) (redrive.ImportResult, int, error) {
	t.Helper()
	ctx := context.Background()
	opts := sqlite.Options{Logger: quietLogger()}
	if c != nil {
		opts.Payloads = c
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "dst.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cl := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	res, ierr := cl.Import(ctx, dir, nil)
	n, err := cl.Count(ctx, redrive.Filter{States: []redrive.State{redrive.Dead}})
	if err != nil {
		t.Fatal(err)
	}
	return res, int(n), ierr
}

// edit rewrites the file name of the job folder job with f.
func edit(t *testing.T, job, name string, f func(string) string) {
	t.Helper()
	p := filepath.Join(job, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(f(string(b))), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestImportRefusesTamperedSealed: a sealed payload that the store's key
// of its id does not open (its bytes altered, its metadata.json's queue
// changed, or another key of the same id sealed it) fails the import,
// naming the folder, and nothing is added; with the right key it
// imports, and without any key of that id it is kept (undecryptable
// until the key is configured), as documented.
func TestImportRefusesTamperedSealed(t *testing.T) {
	k1 := keyPolicy(t, "k1", 1)
	foreign := keyPolicy(t, "k1", 9) // another key under the same id
	for _, tc := range []struct {
		name   string
		tamper func(job string)
		codec  store.PayloadCodec
	}{
		{"queue changed", func(job string) {
			edit(t, job, "metadata.json", func(s string) string { return strings.Replace(s, `"queue": "sec"`, `"queue": "other"`, 1) })
		}, k1},
		{"bytes altered", func(job string) {
			edit(t, job, "payload.json", func(s string) string {
				i := strings.LastIndex(s, `"`) - 5
				c := byte('A')
				if s[i] == 'A' {
					c = 'B'
				}
				return s[:i] + string(c) + s[i+1:]
			})
		}, k1},
		{"foreign key of the same id", func(string) {}, foreign},
	} {
		dir, job := sealedExport(t)
		tc.tamper(job)
		res, n, err := importInto(t, tc.codec, dir)
		if err == nil || !strings.Contains(err.Error(), "job folder "+filepath.Base(job)+":") || n != 0 {
			t.Errorf("%s: import = %+v, %v; %d dead jobs added; want an error naming folder %s and none added", tc.name, res, err, n, filepath.Base(job))
		}
		if err != nil && strings.Contains(err.Error(), "T0P-SECRET") {
			t.Errorf("%s: the error shows the plaintext: %v", tc.name, err)
		}
	}
	dir, _ := sealedExport(t)
	if res, n, err := importInto(t, k1, dir); err != nil || res.Imported != 1 || res.Undecryptable != 0 || n != 1 {
		t.Errorf("with the key: %+v, %v, %d", res, err, n)
	}
	if res, n, err := importInto(t, nil, dir); err != nil || res.Undecryptable != 1 || n != 1 {
		t.Errorf("without keys: %+v, %v, %d; want kept, undecryptable", res, err, n)
	}
	if res, n, err := importInto(t, keyPolicy(t, "k7", 7), dir); err != nil || res.Undecryptable != 1 || n != 1 {
		t.Errorf("without the key's id: %+v, %v, %d; want kept, undecryptable", res, err, n)
	}
}
