package netguard_test

import (
	"strings"
	"testing"

	"github.com/redrivehq/redrive/internal/netguard"
)

// TestParseURLErrorsHideSecrets: ParseURL's errors show a URL without its
// credentials or query, as its doc says, also when the URL does not parse
// (url.Parse's own error quotes the URL whole): the error of an enqueue
// refused for it goes to the caller, to logs, and to the span of the
// request that carried it.
func TestParseURLErrorsHideSecrets(t *testing.T) {
	g := netguard.New(netguard.Options{})
	for _, raw := range []string{
		"https://user:s3cret@example.com/a%zz?token=t0ken",
		"https://user:s3cret@exa mple.com/?token=t0ken",
		"https://user:s3cret@example.com:99999x/?token=t0ken",
		"https://user:s3cret@example.com/\x7f?token=t0ken",
		"ftp://user:s3cret@example.com/?token=t0ken",
	} {
		_, err := g.ParseURL(raw)
		if err == nil {
			t.Fatalf("%q parsed, want an error", raw)
		}
		if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "t0ken") {
			t.Errorf("%q: the error shows a secret: %s", raw, msg)
		}
	}
}
