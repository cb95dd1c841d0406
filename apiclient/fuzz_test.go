package apiclient

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseError: any error answer, JSON or not, becomes an *Error with
// the status, a code and a message, valid UTF-8, never a panic; the
// API's own body is taken as is.
func FuzzParseError(f *testing.F) {
	f.Add(404, "", []byte(`{"error":{"code":"not_found","message":"job 7 not found","field":"id"}}`))
	f.Add(400, "", []byte(`{"error":{"code":"invalid","message":""}}`))
	f.Add(429, "30", []byte(`{"error":null}`))
	f.Add(502, "x", []byte("<html>bad gateway</html>"))
	f.Add(599, "-1", []byte("\xff\xfe"+strings.Repeat("é", 150)))
	f.Add(503, "99999999999", []byte(`[1,2]`))
	f.Add(503, "Wed, 21 Oct 2015 07:28:00 GMT", []byte(""))
	f.Fuzz(func(t *testing.T, status int, retryAfter string, body []byte) {
		if status < 100 || status > 999 {
			return
		}
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		e := parseError("GET", "/v1/x", status, h, body)
		if e.StatusCode != status || e.Code == "" || e.Message == "" || e.RetryAfter < 0 {
			t.Fatalf("%+v", e)
		}
		if !utf8.ValidString(e.Message) {
			t.Fatalf("message not UTF-8: %q", e.Message)
		}
		if !strings.Contains(e.Error(), e.Code) {
			t.Fatalf("Error() %q lacks the code %q", e.Error(), e.Code)
		}
		var target *Error
		if !errors.As(error(e), &target) {
			t.Fatal("errors.As")
		}
	})
}

// FuzzExportStream: any stream ends (io.EOF or an error, then the same
// error again), and every line returned holds a job.
func FuzzExportStream(f *testing.F) {
	f.Add([]byte(`{"job":{"id":1,"kind":"a","state":"dead"},"error":{"job_id":1},"metadata":{}}` + "\n"))
	f.Add([]byte(`{"job":{"id":1}}` + "\n" + `{"job":null}` + "\n"))
	f.Add([]byte(`{"job":{"id":2}}{"job":{"id":3}}`))
	f.Add([]byte(`{"job":{"id":1}}` + "\n" + `{"job":{"id":`))
	f.Add([]byte("\n\n  \n"))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newExportStream(io.NopCloser(strings.NewReader(string(data))), -1)
		for range len(data) + 2 {
			line, err := s.Next()
			if err != nil {
				if again, err2 := s.Next(); err2 != err || again.Job != nil {
					t.Fatalf("after %v: %v, %+v", err, err2, again)
				}
				return
			}
			if line.Job == nil || line.Job.ID <= 0 {
				t.Fatalf("line without a job: %+v", line)
			}
		}
		t.Fatalf("the stream of %d bytes did not end", len(data))
	})
}
