package download

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/redact"
)

// S3Source is a named S3-compatible object store (Amazon S3, MinIO, ...)
// that download jobs read "s3://bucket/key" URLs from: a job names it in
// its payload's "source", and the handler signs each request with the
// source's credentials, which are never in a payload, a job's history or
// a log line.
type S3Source struct {
	// Endpoint is the store's base URL, scheme and host (and port), e.g.
	// "https://s3.eu-west-1.amazonaws.com" or "http://127.0.0.1:9000".
	// Required.
	Endpoint string
	// Region is the region the requests are signed for (default
	// "us-east-1", what MinIO answers to by default).
	Region string
	// VirtualHost addresses a bucket as a host name
	// (https://bucket.s3.eu-west-1.amazonaws.com/key); false, the
	// default, addresses it in the path (http://127.0.0.1:9000/bucket/key),
	// as MinIO and most S3-compatible stores expect.
	VirtualHost bool
	// Credentials are the keys the requests are signed with (minio-go's
	// providers: environment variables, a shared credentials file and
	// profile, static keys...). A source whose credentials give no access
	// key is refused at enqueue unless Anonymous is set.
	Credentials *credentials.Credentials
	// CredentialsFrom says where Credentials are read, in the refusal of
	// a source without them, e.g. "$LAKE_ACCESS_KEY and $LAKE_SECRET_KEY
	// in serve's environment".
	CredentialsFrom string
	// Anonymous sends unsigned requests (a public bucket).
	Anonymous bool
}

// s3Target is the object an s3:// payload names, with its source.
type s3Target struct {
	name   string // the source's name
	src    *S3Source
	base   *url.URL // the source's endpoint
	bucket string
	key    string
}

// ParseS3URL splits "s3://bucket/key" into its bucket and key. The key is
// everything after the bucket's slash, taken literally (no query, fragment
// or percent-decoding, as the AWS tools read such URLs). The bucket must
// be a valid S3 bucket name (3 to 63 lower-case letters, digits, dots and
// hyphens, starting and ending with a letter or digit, not an IP address);
// the key 1 to 1024 bytes of UTF-8 without control characters, not
// starting with "/", with no "." or ".." path segment (which HTTP clients
// and servers rewrite).
func ParseS3URL(raw string) (bucket, key string, err error) {
	rest, ok := cutPrefixFold(raw, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%q is not an s3:// URL: want s3://bucket/key", clip(raw))
	}
	bucket, key, found := strings.Cut(rest, "/")
	if !found || key == "" {
		return "", "", fmt.Errorf("%q names no object: want s3://bucket/key", clip(raw))
	}
	if err := checkBucket(bucket); err != nil {
		return "", "", fmt.Errorf("%q: %w", clip(raw), err)
	}
	if err := checkKey(key); err != nil {
		return "", "", fmt.Errorf("%q: %w", clip(raw), err)
	}
	return bucket, key, nil
}

// cutPrefixFold is strings.CutPrefix ignoring ASCII case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// clip bounds a value quoted in an error.
func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	cut := 200
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// checkBucket checks an S3 bucket name (the rules of Amazon S3's
// general-purpose buckets, which MinIO applies too).
func checkBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q must be 3 to 63 characters long", clip(b))
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return fmt.Errorf("bucket %q holds %q: a bucket name has lower-case letters, digits, dots and hyphens only", clip(b), rune(c))
		}
	}
	if !isAlnum(b[0]) || !isAlnum(b[len(b)-1]) {
		return fmt.Errorf("bucket %q must start and end with a letter or a digit", b)
	}
	if strings.Contains(b, "..") || strings.Contains(b, ".-") || strings.Contains(b, "-.") {
		return fmt.Errorf("bucket %q holds two dots, or a dot beside a hyphen", b)
	}
	if net.ParseIP(b) != nil {
		return fmt.Errorf("bucket %q is an IP address", b)
	}
	return nil
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// checkKey checks an object key.
func checkKey(k string) error {
	switch {
	case len(k) > 1024:
		return fmt.Errorf("the key is %d bytes long, the limit is 1024", len(k))
	case !utf8.ValidString(k):
		return errors.New("the key is not valid UTF-8")
	case strings.ContainsFunc(k, unicode.IsControl):
		return errors.New("the key holds a control character")
	case strings.HasPrefix(k, "/"):
		return errors.New("the key starts with \"/\" (s3://bucket//key): want s3://bucket/key")
	}
	if slices.ContainsFunc(strings.Split(k, "/"), func(seg string) bool { return seg == "." || seg == ".." }) {
		return fmt.Errorf("the key %q holds a \".\" or \"..\" segment", clip(k))
	}
	return nil
}

// ParseS3Endpoint checks a source's endpoint: an http or https URL with a
// host and nothing after it but an optional "/". Its errors never show
// user information the endpoint holds (keys put in the wrong place).
func ParseS3Endpoint(raw string) (*url.URL, error) {
	shown := endpointShown(raw)
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		cause := err
		if ue, ok := errors.AsType[*url.Error](err); ok {
			cause = ue.Err // without the URL, which it quotes whole
		}
		if shown != raw {
			cause = errors.New("it holds user information")
		}
		return nil, fmt.Errorf("endpoint %q is not a URL: %w", shown, cause)
	}
	switch {
	case u.User != nil:
		return nil, fmt.Errorf("endpoint %q holds credentials: give them through the environment or a credentials file", shown)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("endpoint %q: want an http:// or https:// URL, e.g. https://s3.eu-west-1.amazonaws.com", shown)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("endpoint %q names no host", shown)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("endpoint %q: want scheme and host only, without a path or query", shown)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// endpointShown is raw as errors show it: clipped, with anything that
// could be user information (before an "@", after the scheme) masked,
// whether raw parses or not.
func endpointShown(raw string) string {
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		start := 0
		if i := strings.Index(raw, "://"); i >= 0 && i < at {
			start = i + len("://")
		}
		raw = raw[:start] + redact.Mask + raw[at:]
	}
	return clip(raw)
}

// displayURL is how messages and logs name the object.
func (t *s3Target) displayURL() *url.URL {
	return &url.URL{Scheme: "s3", Host: t.bucket, Path: "/" + t.key}
}

// creds returns the source's signing keys; none (and no error) for an
// anonymous source.
func (t *s3Target) creds() (credentials.Value, error) {
	if t.src.Anonymous {
		return credentials.Value{}, nil
	}
	if t.src.Credentials == nil {
		return credentials.Value{}, t.noCredentials(nil)
	}
	v, err := t.src.Credentials.GetWithContext(nil)
	if err != nil || v.AccessKeyID == "" || v.SecretAccessKey == "" {
		return credentials.Value{}, t.noCredentials(err)
	}
	return v, nil
}

// noCredentials is the error of a source whose credentials give no keys.
func (t *s3Target) noCredentials(err error) error {
	msg := fmt.Sprintf("source %q has no credentials", t.name)
	if t.src.CredentialsFrom != "" {
		msg += " (read from " + t.src.CredentialsFrom + ")"
	}
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return errors.New(msg)
}

// request builds the signed GET of the object, for the bytes from offset
// on when offset > 0, then only while the object's ETag is still etag
// (If-Match: a replaced object answers 412, never bytes of another
// version). A whole-object GET asks for the object's checksum.
func (t *s3Target) request(ctx context.Context, offset int64, etag string, header http.Header) (*http.Request, error) {
	u := *t.base
	p := "/" + t.key
	if t.src.VirtualHost {
		u.Host = t.bucket + "." + u.Host
	} else {
		p = "/" + t.bucket + p
	}
	u.Path, u.RawPath = p, s3utils.EncodePath(p)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = slices.Clone(vs)
	}
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
		req.Header.Set("If-Match", etag)
	} else {
		req.Header.Set("X-Amz-Checksum-Mode", "ENABLED")
	}
	v, err := t.creds()
	if err != nil {
		return nil, err
	}
	if t.src.Anonymous {
		return req, nil
	}
	region := t.src.Region
	if region == "" {
		region = "us-east-1"
	}
	// Header authentication needs the payload's hash in a header: a GET
	// has none, the hash of nothing.
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	return signer.SignV4(*req, v.AccessKeyID, v.SecretAccessKey, v.SessionToken, region), nil
}

// checksumSHA256 returns the object's whole SHA-256 in hex when the
// response offers one (x-amz-checksum-sha256 of a full-object checksum;
// the checksum of a multipart upload's parts is not the file's).
func checksumSHA256(resp *http.Response) string {
	v := resp.Header.Get("X-Amz-Checksum-Sha256")
	if v == "" || strings.Contains(v, "-") || strings.EqualFold(resp.Header.Get("X-Amz-Checksum-Type"), "COMPOSITE") {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(b) != 32 {
		return ""
	}
	return hex.EncodeToString(b)
}

// emptySHA256 is the hex SHA-256 of no bytes.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// s3ErrorBody is the XML error document of S3.
type s3ErrorBody struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// The S3 error codes by class (the rest go by their HTTP status).
var (
	s3Permanent = []string{"NoSuchKey", "NoSuchBucket", "NoSuchVersion", "InvalidBucketName", "InvalidObjectName",
		"KeyTooLongError", "PermanentRedirect", "AuthorizationHeaderMalformed", "InvalidObjectState", "MethodNotAllowed"}
	s3RateLimited = []string{"SlowDown", "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequests", "Throttling",
		"ThrottlingException", "XMinioServerNotInitialized"}
	s3NeedsAuth = []string{"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
		"TokenRefreshRequired", "AllAccessDisabled", "AccountProblem", "InvalidSecurity", "XMinioAdminAccountDisabled"}
	s3Transient = []string{"InternalError", "RequestTimeout", "RequestTimeTooSkewed", "XMinioServerTimedOut"}
)

// ReasonS3Prefix starts the reason of a failure S3 explained with an
// error code: "s3:NoSuchKey", "s3:SlowDown", "s3:AccessDenied"...
const ReasonS3Prefix = "s3:"

// s3Failure classifies an S3 error response by its error code, else by
// its status: NoSuchKey, NoSuchBucket... permanent; SlowDown, 503 and
// other throttling rate_limited, no sooner than Retry-After when given;
// AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch, ExpiredToken...
// needs_auth. It reads (at most 8 KiB of) the body, not closing it.
//
// The error never holds the secrets (the source's keys and session
// token): an S3 error document keeps only its Code and Message (AWS's
// SignatureDoesNotMatch echoes the access key id and the canonical
// request, session token included), read from the document even when the
// 8 KiB cut it short; any other body (a proxy's page that may print the
// request's headers) is kept with the secrets masked, and so is the
// Message, including a secret's start cut off at the end of what was
// read.
func s3Failure(resp *http.Response, what string, secrets []string) error {
	se := &failure.StatusError{Code: resp.StatusCode, Status: resp.Status}
	if v := resp.Header.Get("Retry-After"); v != "" {
		se.RetryAfter, _ = failure.ParseRetryAfter(v, time.Now())
	}
	var body s3ErrorBody
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
		var isXML bool
		body, isXML = parseS3Error(b)
		switch {
		case body.Code != "" || isXML:
			se.Body = scrubSecrets(body.Message, secrets)
		default:
			se.Body = scrubSecrets(string(b), secrets)
		}
	}
	// A HEAD-like error without a body (or a proxy's answer) still has
	// the code S3 puts in a header on some answers.
	code := strings.TrimSpace(body.Code)
	if code == "" {
		code = strings.TrimSpace(resp.Header.Get("X-Minio-Error-Code"))
	}
	if !validS3Code(code) {
		// Not a code S3 would give (it goes in the reason, shown on
		// every job): the status decides.
		code = ""
	}
	class := failure.StatusClass(resp.StatusCode)
	switch {
	case slices.Contains(s3Permanent, code):
		class = failure.Permanent
	case slices.Contains(s3RateLimited, code), resp.StatusCode == http.StatusServiceUnavailable,
		resp.StatusCode == http.StatusTooManyRequests:
		class = failure.RateLimited
	case slices.Contains(s3NeedsAuth, code):
		class = failure.NeedsAuth
	case slices.Contains(s3Transient, code):
		class = failure.Transient
	}
	reason := failure.ReasonHTTPPrefix + strconv.Itoa(resp.StatusCode)
	msg := what + ": " + se.Error()
	if code != "" {
		reason = ReasonS3Prefix + code
		msg = what + ": S3 " + code + " (" + se.Error() + ")"
	}
	return &failure.Error{Class: class, Reason: reason, RetryAfter: se.RetryAfter, Err: &s3Error{msg: msg, status: se}}
}

// parseS3Error reads the Code and Message of an S3 error document, as far
// as b holds them (b may be cut short); isXML reports whether b starts as
// an XML document, whose other elements are never kept.
func parseS3Error(b []byte) (body s3ErrorBody, isXML bool) {
	trimmed := bytes.TrimSpace(b)
	if !bytes.HasPrefix(trimmed, []byte("<")) {
		return body, false
	}
	dec := xml.NewDecoder(bytes.NewReader(trimmed))
	var path []string
	for {
		tok, err := dec.Token()
		if err != nil {
			return body, true
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			path = append(path, tok.Name.Local)
		case xml.EndElement:
			if len(path) > 0 {
				path = path[:len(path)-1]
			}
		case xml.CharData:
			// The document's root is <Error>: its Code and Message.
			if len(path) == 2 && path[0] == "Error" {
				switch path[1] {
				case "Code":
					body.Code += string(tok)
				case "Message":
					body.Message += string(tok)
				}
			}
		}
	}
}

// validS3Code reports whether code looks like an S3 error code: 1 to 64
// ASCII letters, digits and dots ("NoSuchKey", "XMinioServerNotInitialized").
func validS3Code(code string) bool {
	if code == "" || len(code) > 64 {
		return false
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.') {
			return false
		}
	}
	return true
}

// secrets are the values that no error of the source may show: its
// keys and session token (none for an anonymous source, or keys that
// cannot be read).
func (t *s3Target) secrets() []string {
	v, err := t.creds()
	if err != nil {
		return nil
	}
	return []string{v.AccessKeyID, v.SecretAccessKey, v.SessionToken}
}

// scrubSecrets masks the secrets in s, and the start of one that s ends
// with (a text cut in the middle of a secret).
func scrubSecrets(s string, secrets []string) string {
	s = redact.Scrub(s, secrets)
	for _, sec := range secrets {
		if len(sec) < redact.MinSecret {
			continue
		}
		for n := min(len(sec)-1, len(s)); n >= redact.MinSecret; n-- {
			if strings.HasSuffix(s, sec[:n]) {
				s = s[:len(s)-n] + redact.Mask
				break
			}
		}
	}
	return s
}

// s3Error is an S3 error response; it unwraps to its status.
type s3Error struct {
	msg    string
	status *failure.StatusError
}

func (e *s3Error) Error() string { return e.msg }
func (e *s3Error) Unwrap() error { return e.status }
