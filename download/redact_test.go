package download_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestSecretsArriveButErrorsMaskThem: the download sends the payload's
// secret header and query as they are, and the error of a server that
// echoes them back shows them masked, classified as the unmasked error
// would be.
func TestSecretsArriveButErrorsMaskThem(t *testing.T) {
	const auth, query = "Bearer dl-SECRET-1111", "dl-SECRET-2222"
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization") + "|" + r.URL.Query().Get("sig_token")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "denied: "+r.Header.Get("Authorization")+" for "+r.URL.String())
	}))
	t.Cleanup(srv.Close)
	h := newHandler(t, download.Options{})
	err := attempt(h, 1, map[string]any{"url": srv.URL + "/f.bin?sig_token=" + query, "dest": "f.bin",
		"headers": map[string]string{"Authorization": auth}})
	if got != auth+"|"+query {
		t.Errorf("the server got %q, want the real secrets", got)
	}
	if err == nil || strings.Contains(err.Error(), "dl-SECRET") || !strings.Contains(err.Error(), "•••") {
		t.Fatalf("error %v: want the secrets masked", err)
	}
	want := failure.Classify(&failure.StatusError{Code: http.StatusUnauthorized, Status: "401 Unauthorized"})
	if v := failure.Classify(err); v.Class != want.Class || v.Reason != want.Reason {
		t.Errorf("classified %s/%s, want %s/%s", v.Class, v.Reason, want.Class, want.Reason)
	}
}
