package redrive_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestParseExportedRefusesUnmarkedEnvelope: a payload.json holding a
// sealed envelope while metadata.json does not say so (no
// payload_sealed: an export always says so) is refused, naming the key:
// imported as plaintext it would be sealed again, and its job would run
// with the envelope as its payload on a store with keys (and read as
// undecryptable on one without).
func TestParseExportedRefusesUnmarkedEnvelope(t *testing.T) {
	errorJSON := []byte(`{"job_id":4,"class":"permanent","dead_at":"2026-01-01T00:00:00Z"}`)
	metadata := []byte(`{"job_id":4,"queue":"q","kind":"k","created_at":"2026-01-01T00:00:00Z"}`)
	for _, p := range []string{`"rdenc:k1:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRob"`, "  \"rdenc:k2:AQID\"\n"} {
		_, _, err := redrive.ParseExported([]byte(p), errorJSON, metadata)
		if !errors.Is(err, redrive.ErrInvalid) || !strings.Contains(err.Error(), "payload_sealed") {
			t.Errorf("ParseExported(%s) without payload_sealed: %v; want ErrInvalid naming payload_sealed", p, err)
		}
	}
	// A plaintext string that merely mentions the prefix is a payload.
	if _, _, err := redrive.ParseExported([]byte(`"see rdenc:k1:x"`), errorJSON, metadata); err != nil {
		t.Errorf("a plaintext string: %v", err)
	}
}
