package download_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestS3ErrorEchoingCredentialsMasked: an S3 endpoint whose error
// answer echoes the request's credentials (AWS's SignatureDoesNotMatch
// carries the access key id and the canonical request, with the session
// token, and is cut at 8 KiB when the token is long; a proxy's error page
// may print the request's headers) never puts the access key, the secret
// or the session token in the attempt's error, which the job's history,
// the DLQ and the logs keep.
func TestS3ErrorEchoingCredentialsMasked(t *testing.T) {
	const access, secret = "AKIAREVIEW37ACCESS", "review37-SECRET-key"
	token := "review37-TOKEN-" + strings.Repeat("Zm9vYmFy", 400) // a long STS token
	for _, tc := range []struct {
		name   string
		reason string
		body   func(r *http.Request) string
	}{
		{"signature-mismatch-cut", "s3:SignatureDoesNotMatch", func(r *http.Request) string {
			canon := "GET\n" + r.URL.EscapedPath() + "\n\nhost:" + r.Host + "\nx-amz-security-token:" + r.Header.Get("X-Amz-Security-Token") + "\n"
			var hexb strings.Builder
			for i := 0; i < len(canon); i++ {
				fmt.Fprintf(&hexb, "%02x ", canon[i])
			}
			return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code>` +
				`<Message>The request signature we calculated does not match the signature you provided.</Message>` +
				`<AWSAccessKeyId>` + access + `</AWSAccessKeyId><CanonicalRequest>` + canon + `</CanonicalRequest>` +
				`<CanonicalRequestBytes>` + hexb.String() + `</CanonicalRequestBytes><RequestId>1</RequestId></Error>`
		}},
		{"proxy-echo", "http_403", func(r *http.Request) string {
			return "Bad Request: " + r.Header.Get("X-Amz-Security-Token") + " " + r.Header.Get("Authorization")
		}},
		{"proxy-echo-secret", "http_403", func(r *http.Request) string {
			return "debug: access " + access + " secret " + secret
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprint(w, tc.body(r))
			}))
			t.Cleanup(srv.Close)
			src := download.S3Source{Endpoint: srv.URL, Credentials: credentials.NewStaticV4(access, secret, token)}
			h := newHandler(t, download.Options{Sources: map[string]download.S3Source{"lake": src}})
			err := attempt(h, 1, map[string]any{"url": "s3://bucket/key.bin", "source": "lake", "dest": "f.bin"})
			verdict(t, err, failure.NeedsAuth, tc.reason)
			msg := err.Error()
			for what, s := range map[string]string{"access key": access, "secret": secret, "session token": token[:40]} {
				if strings.Contains(msg, s) {
					t.Errorf("the error shows the %s: %s", what, msg)
				}
			}
		})
	}
}
