package httpjob_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/httpjob"
)

// TestMaskRefused: a payload copied from a masked read, the redaction
// mask where a secret belongs (a header, the URL's user name or
// password, a query
// parameter), is refused naming the field, rather than sent to the
// target as the credential; the same value anywhere else is kept.
func TestMaskRefused(t *testing.T) {
	h := httpjob.New(httpjob.Options{})
	for _, c := range []struct{ payload, field, what string }{
		{`{"url": "https://example.com/", "headers": {"Authorization": "•••"}}`, "payload.headers", `header "Authorization"`},
		{`{"url": "https://bob:%E2%80%A2%E2%80%A2%E2%80%A2@example.com/"}`, "payload.url", "password"},
		{`{"url": "https://%E2%80%A2%E2%80%A2%E2%80%A2@example.com/"}`, "payload.url", "user name"},
		{`{"url": "https://%E2%80%A2%E2%80%A2%E2%80%A2:%E2%80%A2%E2%80%A2%E2%80%A2@example.com/"}`, "payload.url", "user name"},
		{`{"url": "https://example.com/?api_key=%E2%80%A2%E2%80%A2%E2%80%A2"}`, "payload.url", `query parameter "api_key"`},
	} {
		err := h.Validate(json.RawMessage(c.payload))
		var fe *redrive.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.what) || !strings.Contains(err.Error(), "reveal=true") {
			t.Errorf("Validate(%s) = %v; want a %s error naming %s and how to read the secret", c.payload, err, c.field, c.what)
		}
	}
	if err := h.Validate(json.RawMessage(`{"url": "https://example.com/", "method": "POST", "body": "•••", "headers": {"X-Note": "a •••"}}`)); err != nil {
		t.Errorf("the mask outside a secret's place: %v", err)
	}
}
