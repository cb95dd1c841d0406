// Package download is redrive's built-in "download" job kind: each job
// fetches one URL with GET into a file under a download directory, and
// resumes where the last attempt stopped.
//
// A job's payload is JSON:
//
//	{
//	  "url":       "https://example.com/data/2024.csv.gz",  // required, http, https or s3://bucket/key
//	  "source":    "lake",                // the Options.Sources an s3:// url is read from
//	  "dest":      "datasets/",           // inside Options.Dir; empty or ending in "/": a directory
//	  "headers":   {"Authorization": "Bearer ..."},
//	  "sha256":    "9f86d0...",           // optional, 64 hex digits
//	  "max_bytes": 1073741824,            // optional, default and limit Options.MaxBytes
//	  "timeout":   "1h",                  // per attempt, default Options.DefaultTimeout
//	  "overwrite": false                  // optional, default true: replace a file already there
//	}
//
// When dest names a directory, the file's name is the filename of the
// response's Content-Disposition (not for an s3:// URL, whose uploader
// chose it), else the last segment of the URL's path (the key's),
// sanitised (no path separators, control characters or leading dots;
// "download" when nothing is left).
//
// # The final file is atomic
//
// An attempt writes into a temporary file beside the destination,
// ".<name>.redrive-<job id>.part" (".redrive-<job id>.part" for a
// directory destination, whose name comes with the response), with a
// sidecar ".meta"
// JSON file holding the URL, the response's ETag, Last-Modified and total
// size, and how many bytes of the partial file are known to be on disk
// (fsynced). Once every byte is in, the file is fsynced, its size checked
// against the announced total, its SHA-256 checked when the payload (or
// an S3 store) gives one, and only then renamed to its final name and the directory fsynced.
// A reader never sees a half-written file under the final name, and a
// crash at any point leaves no file under it (but possibly the temporary
// files, which the next attempt of the job uses or replaces). An existing
// file at the final name is replaced, unless the payload says
// "overwrite": false: then the job fails, permanent (reason "exists"),
// naming the file, which is left as it is (checked before the request
// when dest names the file, and at the end by linking the partial file
// to the final name, which never replaces a file).
//
// # Working files
//
// The partial file and its sidecar are the job's own: a job is named by
// its id, by a digest of its idempotency key ("k..." for a broker's
// message), or, with neither, by random digits for one attempt (nothing
// can resume it, so its files go when the attempt ends). An attempt
// holds an exclusive lock (flock) on the partial file from start to
// rename, so two attempts of one job at once (a lease that expired while
// its handler ran) never write one file: the second fails, transient,
// reason "in_use". No dest may name a working file (a path element
// starting with ".redrive", or with a dot and holding ".redrive-", case
// ignored), so a job cannot plant another job's partial file or sidecar;
// the final name of a directory destination read back from a sidecar is
// used only if it is a name sanitize gives, and the file is renamed only
// into the destination's directory, inside the download directory.
//
// The working files go when the job ends: a permanent failure, a cancel,
// an attempt that its worker's policy will not retry (with Register).
// Sweep removes those left over (a job purged, or dead after a crash):
// Register runs it once at start, Handle every Options.SweepInterval.
//
// # Resuming
//
// A retry, or an attempt of a job rescued after its worker died, finds the
// partial file of its job and asks only for the missing bytes: "Range:
// bytes=<size>-" with "If-Range: <etag or last-modified>". A 206 Partial
// Content whose range starts there, repeating the sidecar's ETag (else
// Last-Modified) and Content-Encoding, is appended (a 206 of another
// version or encoding, from a server that ignores If-Range, starts the
// file over instead); a 200 (the server ignores
// Range, or the file changed and If-Range failed) truncates the partial
// file and starts over; a 416 Range Not Satisfiable while the partial file
// is already complete finishes it. A partial file is not resumed, but
// started over, when its sidecar is missing or unreadable, was written for
// another URL, or the server gave no strong ETag and no Last-Modified
// (without a validator, appending could mix two versions of a file): the
// handler logs why at Warn ("download: cannot resume"), and logs when a
// response carries no validator, so that an interrupted attempt will
// start over from byte 0. A
// resume starts from the partial file's size while the machine has not
// restarted since it was written (the sidecar records the kernel's boot:
// a killed process loses nothing the kernel took); after a restart, the
// partial file is first cut back to the size last fsynced (a checkpoint
// every Options.CheckpointBytes, 64 MiB by default, and whenever an
// attempt fails).
//
// # Failures
//
// A body that ends with its connection (no Content-Length, no chunking)
// is checked with a range from its end when there is a validator: a 206
// of the same version completes it, a 416 confirms it, and so does a 200
// (a server that ignores Range) unless its Content-Length is another
// size; a 200 of another size, or an answer that would be retried (5xx,
// 408, 429), fails the attempt, transient, and the next one checks again.
//
// An attempt must make progress: fewer than Options.StallBytes received
// in Options.StallTimeout (64 KiB a minute by default), from the request
// on, ends it, transient (reason "stalled"); the next attempt resumes.
//
// HTTP statuses and network errors are classified as the http kind's
// (package failure): 5xx and 408 are retried, 429 and 503 with Retry-After
// no sooner than the server asked, 401 and 403 go to the DLQ with reason
// needs_auth, 404 and other 4xx at once; refused or reset connections,
// DNS errors and timeouts are retried. A connection dropped in the middle
// of the body is transient and the next attempt resumes. A body larger
// than max_bytes is permanent (reason "too_large"), as is a SHA-256
// mismatch ("checksum_mismatch"); both remove the partial file. A full
// disk (ENOSPC, EDQUOT) is transient (reason "disk_full") and counts
// against the "disk" circuit breaker of Options.Breakers: while it is
// open, download jobs are deferred without using an attempt. A
// destination that cannot be written (permission denied, a directory in
// the way, a file where a directory should be) is permanent (reason
// "unwritable"). A payload that cannot be used is permanent; Register
// also makes the client refuse it at enqueue (Validate).
//
// While it runs, an attempt reports its progress in bytes
// (redrive.Progress), and a success is recorded in the job's history
// (redrive.Record, reason "downloaded") as "<bytes> bytes to <dest>",
// with ", sha256 <hex>" when the file was hashed: only when a digest is
// checked (the payload's sha256, an S3 store's checksum) or
// Options.RecordSHA256 is set.
//
// # Objects of S3-compatible stores
//
// A payload's url may be "s3://bucket/key" with "source" naming one of
// Options.Sources (an endpoint, a region, path-style or virtual-host
// addressing, credentials): each GET is signed (AWS Signature V4) with the
// source's keys, which are never in the payload, the job's history or the
// logs. A retry resumes with "Range" and "If-Match: <ETag>": an object
// replaced since the partial file began answers 412, and the download
// starts over from byte 0. A store that gives no ETag is never resumed
// (Last-Modified, to the second, does not tell a replaced object): each
// attempt starts over. A full-object SHA-256 the store offers
// (x-amz-checksum-sha256) is checked. S3's error codes are classified
// (reason "s3:<Code>"): NoSuchKey, NoSuchBucket... permanent; SlowDown,
// 503 and other throttling rate_limited (with Retry-After); AccessDenied,
// InvalidAccessKeyId, SignatureDoesNotMatch, ExpiredToken... needs_auth.
// An s3:// URL without a source, an unknown source, a malformed URL or a
// source without credentials is refused by Validate.
//
// The handler refuses link-local and cloud-metadata addresses, and
// private ones with BlockPrivate, on the address actually dialed and on
// every redirect, with the http kind's guard; a redirect to another
// origin carries none of the payload's headers but harmless ones
// (netguard.RedirectHeaders), so credentials stay with the host named.
package download

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/httpreq"
	"github.com/redrivehq/redrive/internal/netguard"
	"github.com/redrivehq/redrive/internal/redact"
	"github.com/redrivehq/redrive/retry"
)

// Kind is the job kind Register handles.
const Kind = "download"

// Defaults and bounds of Options.
const (
	// DefaultMaxBytes is the largest download when Options.MaxBytes is
	// not set (10 GiB).
	DefaultMaxBytes = 10 << 30
	// DefaultTimeout bounds an attempt whose payload sets no timeout. An
	// attempt cut short by it is retried and resumes.
	DefaultTimeout = time.Hour
	// DefaultMaxTimeout is the largest timeout a payload may ask for.
	DefaultMaxTimeout = 24 * time.Hour
	// MaxHeaders bounds the number of headers of one payload.
	MaxHeaders = 100
	// MaxRedirects bounds the redirects followed by one attempt.
	MaxRedirects = netguard.MaxRedirects
	// DiskBreaker is the name of the circuit breaker, in
	// Options.Breakers, that full disks trip.
	DiskBreaker = "disk"
	// DefaultStallTimeout and DefaultStallBytes are the minimum progress
	// of an attempt: at least DefaultStallBytes every
	// DefaultStallTimeout (about 1 KiB/s), else it ends as stalled.
	DefaultStallTimeout = time.Minute
	DefaultStallBytes   = 64 << 10
	// DefaultOrphanAge is how long Sweep keeps the working files of a
	// job it cannot look up.
	DefaultOrphanAge = 24 * time.Hour
	// DefaultSweepInterval is how often, at most, Handle sweeps.
	DefaultSweepInterval = time.Hour
)

// Reasons of the failures the kind reports itself (the verdict's reason
// in the job's history).
const (
	ReasonTooLarge         = "too_large"
	ReasonChecksumMismatch = "checksum_mismatch"
	ReasonDiskFull         = "disk_full"
	ReasonUnwritable       = "unwritable"
	ReasonDiskError        = "disk_error"
	// ReasonStalled: fewer than Options.StallBytes arrived in
	// Options.StallTimeout; transient, the next attempt resumes.
	ReasonStalled = "stalled"
	// ReasonInUse: another attempt of the job (its lease expired while
	// it ran) holds the partial file; transient.
	ReasonInUse = "in_use"
	// ReasonExists: a file is at the final name and the payload says
	// "overwrite": false; permanent.
	ReasonExists = "exists"
	// ReasonDownloaded is the reason of the "completed" event.
	ReasonDownloaded = "downloaded"
)

// bufferSize is how many bytes are copied at a time: the largest read
// from the response, and so the largest write to the file. 32 KiB, as
// io.Copy: on Linux 6.18 with ext4, writes of 256 KiB cost the kernel
// about twice the system CPU per byte of writes of 32 KiB (in an A/B,
// the kind's s3:// downloads spent 1.8-2.1x minio-go's CPU per GiB with
// 256 KiB, 0.97-1.09x with 32 KiB: docs/BENCHMARKS.md, "Downloads").
const bufferSize = 32 << 10

// DefaultCheckpointBytes is how many bytes an attempt writes between two
// checkpoints (fsync of the partial file, sidecar) when
// Options.CheckpointBytes is not set.
const DefaultCheckpointBytes = 64 << 20

// Options configure the download job kind. Dir is required.
type Options struct {
	// Dir is the download directory: every file is written inside it. It
	// is created if missing.
	Dir string
	// Logger receives what the handler reports besides a job's result (a
	// download that cannot resume, and why; sweeps). Default: Register
	// uses the worker's, New slog.Default().
	Logger *slog.Logger
	// BlockPrivate refuses loopback, private, shared and unspecified
	// addresses (as httpjob.Options.BlockPrivate).
	BlockPrivate bool
	// AllowLinkLocal allows link-local addresses and cloud metadata
	// endpoints, refused by default (as httpjob.Options.AllowLinkLocal).
	AllowLinkLocal bool
	// AllowLinkLocalSetting and AllowPrivateSetting name, in refusals, the
	// settings that allow link-local and private addresses, as the
	// program's users set them (default "download.Options.AllowLinkLocal"
	// and "download.Options.BlockPrivate false").
	AllowLinkLocalSetting string
	AllowPrivateSetting   string
	// MaxBytes is the largest download, the default and the upper limit
	// of a payload's max_bytes (default DefaultMaxBytes).
	MaxBytes int64
	// DefaultTimeout bounds an attempt whose payload gives no timeout
	// (default DefaultTimeout).
	DefaultTimeout time.Duration
	// MaxTimeout is the largest timeout a payload may ask for (default
	// DefaultMaxTimeout).
	MaxTimeout time.Duration
	// StallTimeout and StallBytes are the minimum progress of an
	// attempt: from the request on, fewer than StallBytes received (or
	// read back from the partial file to hash it) in any StallTimeout
	// ends the attempt, transient, reason "stalled", rather than letting
	// a silent or trickling server hold a worker for the whole timeout.
	// Defaults DefaultStallTimeout and DefaultStallBytes; a negative
	// StallTimeout turns the check off.
	StallTimeout time.Duration
	StallBytes   int64
	// UserAgent is sent when the payload sets no User-Agent (default
	// "redrive-download/1").
	UserAgent string
	// NoTraceParent stops the requests from carrying the attempt's W3C
	// trace context (as httpjob.Options.NoTraceParent): by default, when
	// the worker traces, each request has a traceparent header naming
	// the attempt's span, unless the payload sets its own.
	NoTraceParent bool
	// RedactHeaders are the patterns of the header and query parameter
	// names whose values are secrets (see server.Options.RedactHeaders):
	// an attempt's error and result notes show them as "•••", so that
	// neither the job's history, the DLQ nor the logs keep a secret a
	// server echoed. nil: the defaults; empty: none; an invalid list: the
	// defaults. The request itself is sent with the real values.
	RedactHeaders []string
	// Breakers holds the "disk" breaker (DiskBreaker) that full disks
	// trip. Register defaults it to the worker's; New to a registry of
	// its own.
	Breakers *breaker.Registry
	// HandlerOptions are passed to the worker's HandleFunc.
	HandlerOptions []redrive.HandlerOption
	// Lookup returns a job by id, for Sweep: the working files of a job
	// in a final state, or gone, are removed. Register defaults it to the
	// worker's client (Client.Get).
	Lookup func(ctx context.Context, id int64) (*redrive.Job, error)
	// OrphanAge is how long Sweep keeps the working files of a job it
	// cannot look up (default DefaultOrphanAge).
	OrphanAge time.Duration
	// SweepInterval is how often, at most, Handle starts a Sweep in the
	// background (default DefaultSweepInterval); Register sweeps once at
	// start. Negative: never from Handle.
	SweepInterval time.Duration
	// CheckpointBytes is how many bytes an attempt writes between two
	// checkpoints: an fsync of the partial file and a new sidecar, from
	// which an attempt after a machine restart resumes (a killed process
	// loses nothing the kernel took, and resumes from the file's size).
	// Fewer fsyncs cost less time; more re-fetch less after a power cut.
	// Default DefaultCheckpointBytes.
	CheckpointBytes int64
	// RecordSHA256 hashes every file (SHA-256) and records the digest in
	// the job's history ("<bytes> bytes to <dest>, sha256 <hex>"). By
	// default a file is hashed only when something checks the digest:
	// the payload's sha256, or the checksum an S3 store offers; hashing
	// every byte was most of the kind's CPU, for a digest nobody asked
	// for.
	RecordSHA256 bool
	// Sources are the S3-compatible stores that payloads name in
	// "source" to read "s3://bucket/key" URLs, by name. Their endpoints
	// are the operator's, so BlockPrivate does not apply to them.
	Sources map[string]S3Source
}

// Payload is the payload of a download job.
type Payload struct {
	// URL is the http or https URL to GET, or "s3://bucket/key" with
	// Source.
	URL string `json:"url"`
	// Source names the S3 source (Options.Sources) an s3:// URL is read
	// from; required with an s3:// URL, refused with any other.
	Source string `json:"source,omitempty"`
	// Dest is the path of the file, relative to Options.Dir, with "/" as
	// separator. Empty or ending in "/", it names a directory and the
	// file's name comes from the response (Content-Disposition) or the
	// URL.
	Dest string `json:"dest,omitempty"`
	// Headers are request headers. Range and If-Range are the handler's.
	Headers map[string]string `json:"headers,omitempty"`
	// SHA256 is the expected hex SHA-256 of the whole file (optional).
	SHA256 string `json:"sha256,omitempty"`
	// MaxBytes bounds the file's size (default and limit
	// Options.MaxBytes).
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Timeout bounds one attempt: a Go duration such as "30m" or a number
	// of seconds.
	Timeout json.RawMessage `json:"timeout,omitempty"`
	// Overwrite says what to do when a file already exists at the final
	// name: true or absent (nil) replaces it, as the kind always did;
	// false fails the job, permanent (reason "exists"), naming the file,
	// and leaves it as it is.
	Overwrite *bool `json:"overwrite,omitempty"`
}

// Handler performs download jobs. Create it with New; Register is the
// usual way to use it.
type Handler struct {
	opts     Options
	redactor *redact.Redactor
	root     string // Options.Dir, absolute, symlinks resolved
	guard    *netguard.Guard
	client   *http.Client
	// s3client sends the requests of S3 sources: no guard (the operator
	// chose the endpoints), no redirects followed, no transparent gzip.
	s3client *http.Client
	// sources are Options.Sources with their endpoints parsed.
	sources map[string]*s3Source

	// wrapWriter, set by tests only, wraps the writer of the partial file
	// (to inject disk errors).
	wrapWriter func(io.Writer) io.Writer
	// policyFor, set by Register, is the worker's retry policy of a job:
	// an attempt that will not be retried removes its working files.
	policyFor func(*redrive.Job) retry.Policy
	// lastSweep is when Handle last started a Sweep (Unix nanoseconds).
	lastSweep atomic.Int64
	// log reports background sweeps.
	log *slog.Logger
}

// New returns a handler for download jobs with its own connection pool.
// It creates Options.Dir if missing.
func New(opts Options) (*Handler, error) {
	if opts.Dir == "" {
		return nil, errors.New("download: Options.Dir is required")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = DefaultTimeout
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = DefaultMaxTimeout
	}
	if opts.DefaultTimeout > opts.MaxTimeout {
		opts.DefaultTimeout = opts.MaxTimeout
	}
	if opts.AllowLinkLocalSetting == "" {
		opts.AllowLinkLocalSetting = "download.Options.AllowLinkLocal"
	}
	if opts.AllowPrivateSetting == "" {
		opts.AllowPrivateSetting = "download.Options.BlockPrivate false"
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "redrive-download/1"
	}
	if opts.Breakers == nil {
		opts.Breakers = breaker.NewRegistry(breaker.Config{})
	}
	if opts.StallTimeout == 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	if opts.StallBytes <= 0 {
		opts.StallBytes = DefaultStallBytes
	}
	if opts.CheckpointBytes <= 0 {
		opts.CheckpointBytes = DefaultCheckpointBytes
	}
	if opts.OrphanAge <= 0 {
		opts.OrphanAge = DefaultOrphanAge
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("download: Options.Dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("download: Options.Dir: %w", err)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("download: Options.Dir: %w", err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("download: Options.Dir %s is not a directory", opts.Dir)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{opts: opts, root: root, log: log, redactor: redact.ForHeaders(opts.RedactHeaders)}
	h.lastSweep.Store(time.Now().UnixNano())
	h.guard = netguard.New(netguard.Options{Name: "download",
		BlockPrivate: opts.BlockPrivate, AllowLinkLocal: opts.AllowLinkLocal,
		AllowLinkLocalSetting: opts.AllowLinkLocalSetting, AllowPrivateSetting: opts.AllowPrivateSetting})
	tr := h.guard.NewTransport()
	// The file is saved as served: no transparent gzip, whose ranges and
	// validators would not match the file's.
	tr.DisableCompression = true
	h.client = h.guard.NewClient(tr)
	h.sources = map[string]*s3Source{}
	for name, src := range opts.Sources {
		base, err := ParseS3Endpoint(src.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("download: source %q: %w", name, err)
		}
		h.sources[name] = &s3Source{S3Source: src, base: base}
	}
	s3tr := http.DefaultTransport.(*http.Transport).Clone()
	s3tr.DisableCompression = true
	s3tr.MaxIdleConnsPerHost = 64
	h.s3client = &http.Client{Transport: s3tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return h, nil
}

// s3Source is a source of Options.Sources, its endpoint parsed.
type s3Source struct {
	S3Source
	base *url.URL
}

// Register registers the "download" job kind on w, and its payload check
// (Validate) on w's client: a download job whose payload an attempt would
// refuse is refused at enqueue, naming the field. Options.Breakers
// defaults to w.Breakers(), so the "disk" breaker shows with the worker's.
//
// Register also sweeps the download directory in the background (Sweep),
// looking jobs up with the worker's client, and makes an attempt that
// the worker's retry policy will not retry remove its working files.
func Register(w *redrive.Worker, opts Options) error {
	if opts.Breakers == nil {
		opts.Breakers = w.Breakers()
	}
	if opts.Lookup == nil {
		opts.Lookup = w.Client().Get
	}
	if opts.Logger == nil {
		opts.Logger = w.Executor().Logger()
	}
	h, err := New(opts)
	if err != nil {
		return err
	}
	h.policyFor = w.Executor().PolicyFor
	w.HandleFunc(Kind, h.Handle, opts.HandlerOptions...)
	w.Client().SetValidator(Kind, h.Validate)
	go h.sweep()
	return nil
}

// sweep runs Sweep in the background, logging what it did.
func (h *Handler) sweep() {
	n, err := h.Sweep(context.Background())
	switch {
	case err != nil:
		h.log.Warn("download: sweeping working files failed", "dir", h.root, "removed", n, "error", err)
	case n > 0:
		h.log.Info("download: removed working files no attempt will resume", "dir", h.root, "removed", n)
	}
}

// maybeSweep starts a background Sweep when the last one started more
// than Options.SweepInterval ago.
func (h *Handler) maybeSweep() {
	if h.opts.SweepInterval < 0 {
		return
	}
	last, now := h.lastSweep.Load(), time.Now().UnixNano()
	if now-last < int64(h.opts.SweepInterval) || !h.lastSweep.CompareAndSwap(last, now) {
		return
	}
	go h.sweep()
}

// Dir returns the download directory, absolute with symlinks resolved.
func (h *Handler) Dir() string { return h.root }

// invalid is a payload error: it matches redrive.ErrInvalid, so that the
// API answers 400, with its own message.
type invalid struct{ err error }

func (e *invalid) Error() string        { return e.err.Error() }
func (e *invalid) Unwrap() error        { return e.err }
func (e *invalid) Is(target error) bool { return target == redrive.ErrInvalid }

// plan is a checked payload.
type plan struct {
	p        Payload
	u        *url.URL
	timeout  time.Duration
	maxBytes int64
	sha      string // lower-case hex, or empty
	dir      string // absolute directory of the file
	name     string // final file name, empty when it comes from the response
	header   http.Header
	host     string    // a Host header
	s3       *s3Target // an s3:// URL's object, nil for http(s)
}

// parse checks a payload as Validate documents.
func (h *Handler) parse(raw json.RawMessage) (*plan, error) {
	var p Payload
	bad := func(field, format string, args ...any) (*plan, error) {
		return nil, &redrive.FieldError{Field: field, Err: &invalid{urlError(field, p.URL, fmt.Errorf(format, args...))}}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return bad("payload", "want a JSON object {url, source, dest, headers, sha256, max_bytes, timeout, overwrite}: %w", err)
	}
	if dec.More() {
		return bad("payload", "trailing data after the JSON object")
	}
	pl := &plan{p: p, header: http.Header{}}
	if _, isS3 := cutPrefixFold(strings.TrimSpace(p.URL), "s3:"); isS3 || p.Source != "" {
		if err := h.parseS3(pl); err != nil {
			return nil, err
		}
	} else {
		u, err := h.guard.ParseURL(p.URL)
		if err != nil {
			return bad("payload.url", "%w", err)
		}
		pl.u = u
	}
	u := pl.u
	var err error
	if pl.timeout, err = h.timeout(p.Timeout); err != nil {
		return bad("payload.timeout", "%w", err)
	}
	switch {
	case p.MaxBytes < 0:
		return bad("payload.max_bytes", "max_bytes %d must not be negative", p.MaxBytes)
	case p.MaxBytes > h.opts.MaxBytes:
		return bad("payload.max_bytes", "max_bytes %d is above the limit of %d", p.MaxBytes, h.opts.MaxBytes)
	case p.MaxBytes == 0:
		pl.maxBytes = h.opts.MaxBytes
	default:
		pl.maxBytes = p.MaxBytes
	}
	if p.SHA256 != "" {
		if len(p.SHA256) != 2*sha256.Size {
			return bad("payload.sha256", "sha256 must be 64 hex digits, got %d characters", len(p.SHA256))
		}
		if _, err := hex.DecodeString(p.SHA256); err != nil {
			return bad("payload.sha256", "sha256 must be 64 hex digits: %q", p.SHA256)
		}
		pl.sha = strings.ToLower(p.SHA256)
	}
	if len(p.Headers) > MaxHeaders {
		return bad("payload.headers", "%d headers, the limit is %d", len(p.Headers), MaxHeaders)
	}
	if field, err := httpreq.Masked(u, p.Headers); err != nil {
		return bad(field, "%w", err)
	}
	for k, v := range p.Headers {
		if !httpreq.ValidHeaderName(k) {
			return bad("payload.headers", "header name %q is not a valid HTTP token", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return bad("payload.headers", "header %q: value holds a line break or NUL", k)
		}
		switch {
		case strings.EqualFold(k, "Range"), strings.EqualFold(k, "If-Range"):
			return bad("payload.headers", "header %q is set by the handler to resume downloads", k)
		case strings.EqualFold(k, "Host"):
			pl.host = v
		default:
			pl.header.Set(k, v)
		}
	}
	if pl.header.Get("User-Agent") == "" {
		pl.header.Set("User-Agent", h.opts.UserAgent)
	}
	if err := h.dest(pl); err != nil {
		return nil, &redrive.FieldError{Field: "payload.dest", Err: &invalid{err}}
	}
	return pl, nil
}

// parseS3 checks the url and source of a payload naming an S3 source or
// an s3:// URL, and sets the plan's object.
func (h *Handler) parseS3(pl *plan) error {
	p := pl.p
	bad := func(field, format string, args ...any) error {
		return &redrive.FieldError{Field: field, Err: &invalid{urlError(field, p.URL, fmt.Errorf(format, args...))}}
	}
	names := slices.Sorted(maps.Keys(h.sources))
	known := "none is configured (serve's download-sources setting)"
	if len(names) > 0 {
		known = "the sources are " + strings.Join(names, ", ")
	}
	if p.Source == "" {
		return bad("payload.source", "an s3:// url needs a source naming the store it is read from: %s", known)
	}
	src, ok := h.sources[p.Source]
	if !ok {
		return bad("payload.source", "unknown source %q: %s", clip(p.Source), known)
	}
	bucket, key, err := ParseS3URL(p.URL)
	if err != nil {
		if _, isS3 := cutPrefixFold(strings.TrimSpace(p.URL), "s3:"); !isS3 {
			return bad("payload.url", "source %q reads s3://bucket/key URLs, got %q", p.Source, clip(p.URL))
		}
		return bad("payload.url", "%w", err)
	}
	if len(p.Headers) > 0 {
		return bad("payload.headers", "an s3:// download sends no headers of the payload: the handler signs its requests with the source's credentials")
	}
	pl.s3 = &s3Target{name: p.Source, src: &src.S3Source, base: src.base, bucket: bucket, key: key}
	if _, err := pl.s3.creds(); err != nil {
		return bad("payload.source", "%w", err)
	}
	pl.u = pl.s3.displayURL()
	return nil
}

// urlError masks, in err, an error of the payload's url, the user
// information raw may hold: keys pasted into the URL. Whether raw parses
// or not (an AWS secret key holds '/', which ends the URL's authority),
// what stands between the scheme's "://" and the last "@" is masked,
// whole and in its pieces between '/' and ':' (which errors quote as a
// bucket, a host or a port).
func urlError(field, raw string, err error) error {
	if field != "payload.url" {
		return err
	}
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return err
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	ui := raw[start:at]
	secrets := append([]string{ui}, strings.FieldsFunc(ui, func(r rune) bool { return r == '/' || r == ':' })...)
	return redact.Error(err, secrets)
}

// dest checks the payload's dest and sets the plan's directory and name.
func (h *Handler) dest(pl *plan) error {
	d := pl.p.Dest
	if strings.ContainsFunc(d, unicode.IsControl) || !utf8.ValidString(d) {
		return fmt.Errorf("dest %q holds a control character or invalid UTF-8", d)
	}
	if strings.HasPrefix(d, "/") || strings.HasPrefix(d, `\`) || filepath.IsAbs(d) || filepath.VolumeName(d) != "" {
		return fmt.Errorf("dest %q is absolute: want a path inside the download directory", d)
	}
	for _, part := range strings.FieldsFunc(d, func(r rune) bool { return r == '/' || r == filepath.Separator }) {
		if part == ".." {
			return fmt.Errorf("dest %q holds \"..\": want a path inside the download directory", d)
		}
		if isWorkName(part) {
			return fmt.Errorf("dest %q names a working file of the download kind (%q): names starting with \".redrive\" or "+
				"holding \".redrive-\" after a leading dot are the kind's own", d, part)
		}
	}
	isDir := d == "" || strings.HasSuffix(d, "/") || strings.HasSuffix(d, string(filepath.Separator))
	full := filepath.Join(h.root, filepath.FromSlash(d))
	if !within(h.root, full) {
		return fmt.Errorf("dest %q is outside the download directory", d)
	}
	if isDir {
		pl.dir = full
	} else {
		if full == h.root {
			return fmt.Errorf("dest %q names the download directory itself; end it with \"/\" for a directory", d)
		}
		pl.dir, pl.name = filepath.Split(full)
		pl.dir = filepath.Clean(pl.dir)
	}
	return h.checkSymlinks(full, d)
}

// checkSymlinks resolves the part of p that exists and refuses it when it
// leads outside the download directory.
func (h *Handler) checkSymlinks(p, dest string) error {
	for q := p; ; q = filepath.Dir(q) {
		if _, err := os.Lstat(q); err != nil {
			if q == h.root || q == filepath.Dir(q) {
				return fmt.Errorf("dest %q: the download directory is gone: %w", dest, err)
			}
			continue
		}
		r, err := filepath.EvalSymlinks(q)
		if err != nil {
			return fmt.Errorf("dest %q: cannot resolve %s: %w", dest, q, err)
		}
		if !within(h.root, r) {
			return fmt.Errorf("dest %q leads outside the download directory through a symbolic link (%s -> %s)", dest, q, r)
		}
		return nil
	}
}

// within reports whether p is root or inside it (both clean and absolute).
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// Validate checks a payload as an attempt would before sending anything:
// a JSON object with an http(s) URL whose literal address the guard
// allows, a dest inside the download directory (relative, without "..",
// not leading outside through a symbolic link), a sha256 of 64 hex
// digits, a max_bytes neither negative nor above Options.MaxBytes, valid
// headers (at most MaxHeaders, not Range or If-Range), a timeout in
// range. Its error is a *redrive.FieldError naming the field
// ("payload.url", "payload.dest", "payload.sha256", ...) and matching
// redrive.ErrInvalid. Register makes the worker's client run it on every
// enqueue of the kind.
func (h *Handler) Validate(payload json.RawMessage) error {
	_, err := h.parse(payload)
	return err
}

// timeout parses the payload's timeout (see httpreq.Timeout).
func (h *Handler) timeout(raw json.RawMessage) (time.Duration, error) {
	return httpreq.Timeout(raw, h.opts.DefaultTimeout, h.opts.MaxTimeout, "30m")
}

// fileName returns the sanitised name of a directory destination's file:
// Content-Disposition's filename, else the URL's last path segment.
func fileName(resp *http.Response, u *url.URL) string {
	if cd := resp.Header.Get("Content-Disposition"); cd != "" {
		if _, params, err := mime.ParseMediaType(cd); err == nil {
			if n := sanitize(params["filename"]); n != "" {
				return n
			}
		}
	}
	return urlName(u)
}

// urlName returns the sanitised last segment of u's path, "download"
// when nothing is left.
func urlName(u *url.URL) string {
	if n := sanitize(path.Base(u.Path)); n != "" {
		return n
	}
	return "download"
}

// sanitize makes a served name safe as a file name: its last path
// element, without control characters, without dots or white space at
// either end, at most 200 bytes; "" when nothing is left. It gives its
// own result back unchanged.
func sanitize(name string) string {
	name = strings.ToValidUTF8(name, "_")
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || strings.ContainsRune(`<>:"|?*`, r) {
			return '_'
		}
		return r
	}, name)
	// White space of any kind and dots, at both ends, so that sanitize
	// gives its own result back unchanged (safeName relies on it).
	trim := func(r rune) bool { return unicode.IsSpace(r) || r == '.' }
	name = strings.TrimLeftFunc(name, trim)
	for len(name) > 200 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return strings.TrimRightFunc(name, trim)
}

// isWorkName reports whether name (one path element) could be one of the
// kind's working files (".redrive-<key>.part", ".<name>.redrive-<key>.part",
// their ".meta" and ".meta.tmp" sidecars) or anything else the kind keeps
// beside its files. A dest naming one is refused, so that a job cannot
// write another job's partial file or sidecar. The test ignores case, for
// case-insensitive file systems.
func isWorkName(name string) bool {
	n := strings.ToLower(name)
	return strings.HasPrefix(n, ".redrive") || (strings.HasPrefix(n, ".") && strings.Contains(n, ".redrive-"))
}

// safeName reports whether name, read back from a sidecar, can be the
// final name of a directory destination's file: what sanitize returns
// for itself (a single path element, no leading dot, no separator or
// control character) and not a working file's name.
func safeName(name string) bool {
	return name != "" && sanitize(name) == name && !isWorkName(name) && name != "." && name != ".."
}

// jobKey names a job in its working files: its id; for a message
// without one (a broker's), "k" and a digest of its idempotency key; for
// a job with neither (an AMQP message published without a message id),
// "a" and random digits, and anon set: the attempt's files are its own,
// and no later attempt resumes them.
func jobKey(j *redrive.Job) (key string, anon bool) {
	switch {
	case j.ID != 0:
		return strconv.FormatInt(j.ID, 10), false
	case j.IdempotencyKey != "":
		return "k" + redrive.KeyOf(j.IdempotencyKey)[:16], false
	}
	var b [8]byte
	rand.Read(b[:])
	return "a" + hex.EncodeToString(b[:]), true
}

// diskFull reports whether err says the disk (or the quota) is full.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// classed marks err with a class and a reason.
func classed(class failure.Class, reason string, err error) error {
	return &failure.Error{Class: class, Reason: reason, Err: err}
}

// fileError classifies an error creating or writing the destination.
func fileError(op string, err error) error {
	err = fmt.Errorf("download: %s: %w", op, err)
	switch {
	case diskFull(err):
		return classed(failure.Transient, ReasonDiskFull, err)
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.ENAMETOOLONG),
		errors.Is(err, syscall.ENOTEMPTY):
		return classed(failure.Permanent, ReasonUnwritable, err)
	}
	return classed(failure.Transient, ReasonDiskError, err)
}
