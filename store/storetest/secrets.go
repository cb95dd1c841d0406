package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redrivehq/redrive/store"
)

// testSecrets: a secret is created once, read back the same, replaced by
// a rotation, kept apart from the other names; bad names are refused.
func testSecrets(x *h) {
	a1, err := x.s.Secret(x.ctx, "session")
	if err != nil {
		x.t.Fatalf("Secret: %v", err)
	}
	if len(a1) != store.SecretSize || bytes.Equal(a1, make([]byte, store.SecretSize)) {
		x.t.Fatalf("Secret = %x, want %d random bytes", a1, store.SecretSize)
	}
	if again, err := x.s.Secret(x.ctx, "session"); err != nil || !bytes.Equal(again, a1) {
		x.t.Fatalf("Secret again = %x, %v; want %x", again, err, a1)
	}
	other, err := x.s.Secret(x.ctx, "other")
	if err != nil || bytes.Equal(other, a1) {
		x.t.Fatalf("Secret(other) = %x, %v; want a secret of its own", other, err)
	}
	a2, err := x.s.RotateSecret(x.ctx, "session")
	if err != nil || len(a2) != store.SecretSize || bytes.Equal(a2, a1) {
		x.t.Fatalf("RotateSecret = %x, %v; want new random bytes", a2, err)
	}
	if got, err := x.s.Secret(x.ctx, "session"); err != nil || !bytes.Equal(got, a2) {
		x.t.Fatalf("Secret after rotation = %x, %v; want %x", got, err, a2)
	}
	if got, err := x.s.Secret(x.ctx, "other"); err != nil || !bytes.Equal(got, other) {
		x.t.Fatalf("Secret(other) after rotating session = %x, %v; want %x", got, err, other)
	}
	// Rotating a secret that does not exist yet creates it.
	n1, err := x.s.RotateSecret(x.ctx, "new")
	if err != nil || len(n1) != store.SecretSize {
		x.t.Fatalf("RotateSecret(new) = %x, %v", n1, err)
	}
	if got, err := x.s.Secret(x.ctx, "new"); err != nil || !bytes.Equal(got, n1) {
		x.t.Fatalf("Secret(new) = %x, %v; want %x", got, err, n1)
	}
	for _, name := range []string{"", strings.Repeat("n", 201), "a\x00b", "bad\xff"} {
		if _, err := x.s.Secret(x.ctx, name); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("Secret(%q): %v, want ErrInvalid", name, err)
		}
		if _, err := x.s.RotateSecret(x.ctx, name); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("RotateSecret(%q): %v, want ErrInvalid", name, err)
		}
	}
	if err := x.s.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	if _, err := x.s.Secret(x.ctx, "session"); !errors.Is(err, store.ErrClosed) {
		x.t.Errorf("Secret after Close: %v, want ErrClosed", err)
	}
	if _, err := x.s.RotateSecret(x.ctx, "session"); !errors.Is(err, store.ErrClosed) {
		x.t.Errorf("RotateSecret after Close: %v, want ErrClosed", err)
	}
}

// secretCall is one call of testSecretsConcurrent: its interval on a
// logical clock (start, end), the name, whether it rotated, and the value
// it returned.
type secretCall struct {
	start, end int64
	name       string
	rotate     bool
	value      string
}

// testSecretsConcurrent runs random reads and rotations of a few secrets
// from many goroutines at once and checks the history against the model
// of a register per name, created on first use: every value read is the
// one created or one a rotation of that name returned; no read returns a
// value that was already replaced before it started (a rotation that
// both began after the value's and ended before the read began), nor a
// rotation's value before that rotation began, nor the created value
// once a rotation ended before it; and all first uses agree on one
// created value.
func testSecretsConcurrent(x *h) {
	const goroutines, calls = 8, 25
	names := []string{"s1", "s2", "s3"}
	var (
		clock   atomic.Int64
		mu      sync.Mutex
		history []secretCall
		wg      sync.WaitGroup
	)
	for g := range goroutines {
		rng := rand.New(rand.NewPCG(uint64(g), 42))
		wg.Go(func() {
			for range calls {
				c := secretCall{name: names[rng.IntN(len(names))], rotate: rng.IntN(4) == 0}
				c.start = clock.Add(1)
				var v []byte
				var err error
				if c.rotate {
					v, err = x.s.RotateSecret(x.ctx, c.name)
				} else {
					v, err = x.s.Secret(x.ctx, c.name)
				}
				c.end = clock.Add(1)
				if err != nil {
					x.t.Errorf("%s(%s): %v", map[bool]string{true: "RotateSecret", false: "Secret"}[c.rotate], c.name, err)
					return
				}
				if len(v) != store.SecretSize {
					x.t.Errorf("%s: %d bytes, want %d", c.name, len(v), store.SecretSize)
				}
				c.value = string(v)
				mu.Lock()
				history = append(history, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if x.t.Failed() {
		return
	}
	for _, name := range names {
		if err := checkSecretHistory(name, history); err != nil {
			x.t.Error(err)
		}
	}
}

// checkSecretHistory checks the calls of one name against the model of
// testSecretsConcurrent.
func checkSecretHistory(name string, history []secretCall) error {
	rotations := map[string]secretCall{}
	var reads []secretCall
	for _, c := range history {
		switch {
		case c.name != name:
		case c.rotate:
			if _, dup := rotations[c.value]; dup {
				return fmt.Errorf("%s: two rotations returned the same bytes", name)
			}
			rotations[c.value] = c
		default:
			reads = append(reads, c)
		}
	}
	created := ""
	for _, r := range reads {
		w, rotated := rotations[r.value]
		if !rotated {
			if created != "" && created != r.value {
				return fmt.Errorf("%s: two reads got two different created secrets", name)
			}
			created = r.value
			for _, later := range rotations {
				if later.end < r.start {
					return fmt.Errorf("%s: a read (%d..%d) got the created secret after a rotation ended (%d..%d)",
						name, r.start, r.end, later.start, later.end)
				}
			}
			continue
		}
		if w.start > r.end {
			return fmt.Errorf("%s: a read (%d..%d) got the value of a rotation that began after it (%d..%d)",
				name, r.start, r.end, w.start, w.end)
		}
		for _, later := range rotations {
			if later.start > w.end && later.end < r.start {
				return fmt.Errorf("%s: a read (%d..%d) got the value of rotation %d..%d, replaced by rotation %d..%d before it began",
					name, r.start, r.end, w.start, w.end, later.start, later.end)
			}
		}
	}
	for _, w := range rotations {
		if w.value == created {
			return fmt.Errorf("%s: a rotation returned the created secret", name)
		}
	}
	return nil
}
