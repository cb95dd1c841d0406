package download_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
)

// TestMaskRefused: a download copied from a masked read, the redaction
// mask in a header, is refused at enqueue naming the header, not sent as
// the credential.
func TestMaskRefused(t *testing.T) {
	h, err := download.New(download.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Validate(json.RawMessage(`{"url": "https://example.com/f", "dest": "f", "headers": {"Authorization": "•••"}}`))
	var fe *redrive.FieldError
	if !errors.As(err, &fe) || fe.Field != "payload.headers" || !strings.Contains(err.Error(), `header "Authorization"`) {
		t.Errorf("Validate = %v; want a payload.headers error naming the header", err)
	}
}
