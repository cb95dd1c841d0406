package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestFairQueues: fair-queues reads from the config file (as an array)
// and from the flag; bad entries are refused naming the entry and the
// field, misspelt ones with a suggestion.
func TestFairQueues(t *testing.T) {
	c, err := loadConfig(t, nil, "--config", writeFile(t, "c.json",
		`{"fair-queues":[{"queue":"imports","key":"payload.tenant_id","weights":{"acme":3}},{"queue":"mail","key":"dependency"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.FairShares) != 2 || c.FairShares[0].Queue != "imports" || c.FairShares[0].Weights["acme"] != 3 || c.FairShares[1].Key != "dependency" {
		t.Fatalf("FairShares = %+v", c.FairShares)
	}
	if err := redrive.NewClient(nil, redrive.ClientOptions{}).SetFairShares(c.FairShares); err != nil {
		t.Errorf("SetFairShares(the configured) = %v", err)
	}
	c, err = loadConfig(t, nil, "--fair-queues", `[{"queue":"q","key":"host"}]`)
	if err != nil || len(c.FairShares) != 1 {
		t.Errorf("--fair-queues: %+v, %v", c, err)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"queue":"q"}`, "want a JSON array"},
		{`[{"queue":"q"}]`, "key"},
		{`[{"queue":"q","key":"tenant"}]`, "key"},
		{`[{"queue":"q","key":"host","weights":{"a":0}}]`, "weights.a"},
		{`[{"queue":"q","key":"host","weights":{"a":-1}}]`, "weights.a"},
		{`[{"queue":"q","key":"host","wieghts":{"a":2}}]`, "unknown field"},
		{`[{"key":"host"}]`, "queue"},
		{`[{"queue":"q","key":"host"},{"queue":"q","key":"dependency"}]`, "twice"},
	} {
		_, err := parseFairQueues(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFairQueues(%s) = %v, want an error naming %q", tc.in, err, tc.want)
		}
	}
	if _, err := parseFairQueues(`[{"queue":"q","key":"host","weights":{"a":0}}]`); !errors.Is(err, redrive.ErrInvalid) {
		t.Errorf("a zero weight is %v, want ErrInvalid", err)
	}
	if _, err := loadConfig(t, nil, "--config", writeFile(t, "c.json", `{"fair-queue":[{"queue":"q","key":"host"}]}`)); err == nil ||
		!strings.Contains(err.Error(), `did you mean "fair-queues"?`) {
		t.Errorf("a misspelt fair-queues: %v, want a suggestion", err)
	}
}

// FuzzParseFairQueues: the setting's parser never panics, and what it
// accepts every fair share checks.
func FuzzParseFairQueues(f *testing.F) {
	for _, s := range []string{``, `[]`, `[{"queue":"q","key":"host"}]`, `[{"queue":"q","key":"payload.a.b","weights":{"x":2,"":3}}]`, `[{"queue":"q","key":"host","weights":{"x":1e9}}]`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fs, err := parseFairQueues(s)
		if err != nil {
			return
		}
		for i := range fs {
			if err := fs[i].Check(); err != nil {
				t.Fatalf("parseFairQueues(%q) accepted %+v: %v", s, fs[i], err)
			}
		}
	})
}
