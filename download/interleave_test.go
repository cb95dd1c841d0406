package download_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestInterleavedAttemptsOfOneJob: attempts of one job run at once, in
// random numbers and order (leases expiring while handlers run), against
// a server that drops connections at random points. The contract, as a
// model: whenever the final file exists it is the whole file; an attempt
// either succeeds, or fails transient (in_use while another holds the
// partial file, or a dropped connection); and once every attempt is over
// one more completes it.
func TestInterleavedAttemptsOfOneJob(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	content := data(400_000, 55)
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 1))
	intn := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return r.IntN(n)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if intn(3) > 0 && req.Header.Get("Range") == "" {
			dropAfter(t, w, content, `"i"`, 1+intn(len(content)-1))
			return
		}
		w.Header().Set("ETag", `"i"`)
		http.ServeContent(w, req, "", time.Time{}, bytes.NewReader(content))
	}))
	defer srv.Close()
	for round := range 20 {
		h := newHandler(t, download.Options{})
		final := filepath.Join(h.Dir(), "i.bin")
		p := map[string]any{"url": srv.URL + "/i.bin", "dest": "i.bin"}
		check := func(who string) {
			got, err := os.ReadFile(final)
			if err == nil && !bytes.Equal(got, content) {
				t.Errorf("round %d, %s: the final file holds %d bytes, not the whole file (seed %d)", round, who, len(got), seed)
			}
		}
		var wg sync.WaitGroup
		for range 2 + intn(5) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 1 + intn(4) {
					err := attempt(h, 300, p)
					check("during the attempts")
					if err == nil {
						continue
					}
					if v := failure.Classify(err); v.Class != failure.Transient {
						t.Errorf("round %d: attempt failed %s: %v (seed %d)", round, v.Class, err, seed)
					}
				}
			}()
		}
		wg.Wait()
		for {
			err := attempt(h, 300, p)
			if err == nil {
				break
			}
			if v := failure.Classify(err); v.Class != failure.Transient || errors.Is(err, os.ErrNotExist) {
				t.Fatalf("round %d: last attempt: %v (seed %d)", round, err, seed)
			}
		}
		wantFile(t, final, content)
		wantOnly(t, h.Dir(), "i.bin")
	}
}
