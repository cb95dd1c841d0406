package download

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
)

// TestS3FailureClasses: S3's error codes classify as the issue asks
// (NoSuchKey permanent, SlowDown and 503 rate_limited with Retry-After,
// AccessDenied and the key errors needs_auth), whatever their status;
// without a code, the status decides.
func TestS3FailureClasses(t *testing.T) {
	body := func(code string) string {
		return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>the message of ` + code +
			`</Message><Key>k</Key><RequestId>1</RequestId></Error>`
	}
	for _, tc := range []struct {
		status     int
		code       string
		retryAfter string
		class      failure.Class
		reason     string
		after      time.Duration
	}{
		{404, "NoSuchKey", "", failure.Permanent, "s3:NoSuchKey", 0},
		{404, "NoSuchBucket", "", failure.Permanent, "s3:NoSuchBucket", 0},
		{503, "SlowDown", "7", failure.RateLimited, "s3:SlowDown", 7 * time.Second},
		{503, "SlowDown", "", failure.RateLimited, "s3:SlowDown", 0},
		{503, "", "", failure.RateLimited, "http_503", 0},
		{503, "ServiceUnavailable", "2", failure.RateLimited, "s3:ServiceUnavailable", 2 * time.Second},
		{403, "AccessDenied", "", failure.NeedsAuth, "s3:AccessDenied", 0},
		{403, "InvalidAccessKeyId", "", failure.NeedsAuth, "s3:InvalidAccessKeyId", 0},
		{403, "SignatureDoesNotMatch", "", failure.NeedsAuth, "s3:SignatureDoesNotMatch", 0},
		{400, "ExpiredToken", "", failure.NeedsAuth, "s3:ExpiredToken", 0},
		{500, "InternalError", "", failure.Transient, "s3:InternalError", 0},
		{400, "SomethingNew", "", failure.Permanent, "s3:SomethingNew", 0},
		{502, "", "", failure.Transient, "http_502", 0},
	} {
		h := http.Header{}
		if tc.retryAfter != "" {
			h.Set("Retry-After", tc.retryAfter)
		}
		b := ""
		if tc.code != "" {
			b = body(tc.code)
		}
		resp := &http.Response{StatusCode: tc.status, Status: http.StatusText(tc.status), Header: h, Body: io.NopCloser(strings.NewReader(b))}
		err := s3Failure(resp, "download: GET s3://b/k", nil)
		v := failure.Classify(err)
		if v.Class != tc.class || v.Reason != tc.reason || v.RetryAfter != tc.after {
			t.Errorf("%d %s: %s/%s after %s, want %s/%s after %s (%v)", tc.status, tc.code, v.Class, v.Reason, v.RetryAfter,
				tc.class, tc.reason, tc.after, err)
		}
		if tc.code != "" && !strings.Contains(err.Error(), "the message of "+tc.code) {
			t.Errorf("%s: error %q lacks S3's message", tc.code, err)
		}
	}
}

// FuzzS3Failure: whatever an S3 endpoint answers, s3Failure never panics,
// its reason is "s3:" and a code of letters, digits and dots or
// "http_<status>", and its error never shows the secrets, whole or cut
// at the end of what was read.
func FuzzS3Failure(f *testing.F) {
	const secret, token = "fuzz-SECRET-key", "fuzz-TOKEN-value"
	for _, s := range []string{"", "<Error><Code>NoSuchKey</Code><Message>m</Message></Error>",
		"<Error><Code>SlowDown</Code><Message>" + token + "</Message>", "<Error><Code>a b</Code></Error>",
		"<?xml version=\"1.0\"?><Error><Code>AccessDenied", "plain " + secret, "x fuzz-TOK", "<Error><Code>" + token + "</Code></Error>",
		"<Error><Code>C</Code><Code>D</Code><Nested><Code>E</Code></Nested></Error>"} {
		f.Add(503, s, "")
		f.Add(403, s, "NoSuchKey")
	}
	f.Fuzz(func(t *testing.T, status int, body, header string) {
		if status < 100 || status > 999 {
			return
		}
		h := http.Header{}
		if header != "" {
			h["X-Minio-Error-Code"] = []string{header}
		}
		resp := &http.Response{StatusCode: status, Status: strconv.Itoa(status), Header: h, Body: io.NopCloser(strings.NewReader(body))}
		err := s3Failure(resp, "download: GET s3://b/k", []string{"AKIAFUZZ", secret, token})
		v := failure.Classify(err)
		code, isS3 := strings.CutPrefix(v.Reason, ReasonS3Prefix)
		if isS3 && !validS3Code(code) || !isS3 && v.Reason != failure.ReasonHTTPPrefix+strconv.Itoa(status) {
			t.Fatalf("reason %q", v.Reason)
		}
		msg := err.Error()
		for _, s := range []string{secret, token, "AKIAFUZZ"} {
			if strings.Contains(msg, s) && !strings.Contains("download: GET s3://b/k", s) {
				t.Fatalf("error %q shows %q", msg, s)
			}
		}
	})
}
