package download

import (
	"io"
	"net/http"
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
		err := s3Failure(resp, "download: GET s3://b/k")
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
