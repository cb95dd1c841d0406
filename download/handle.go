package download

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/boot"
	"github.com/redrivehq/redrive/internal/httpreq"
	"github.com/redrivehq/redrive/internal/netguard"
	"github.com/redrivehq/redrive/internal/redact"
	"github.com/redrivehq/redrive/internal/tracectx"
)

// meta is the sidecar of a partial file: what it was downloaded from and
// how much of it is known to be on disk.
type meta struct {
	// URL is the URL downloaded from without its user information, query
	// and fragment (httpreq.Redact), for whoever reads the sidecar: the
	// secrets a URL carries are not written to disk. A sidecar written
	// before URLHash existed holds the whole URL here.
	URL string `json:"url"`
	// URLSalt (crypto/rand.Text: 128 random bits) and URLHash (hex
	// SHA-256 of the salt and the whole URL) recognize the URL of a
	// later attempt.
	URLSalt string `json:"url_salt,omitempty"`
	URLHash string `json:"url_sha256,omitempty"`
	// Source is the S3 source of an s3:// URL.
	Source       string `json:"source,omitempty"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// Total is the whole file's size, -1 when the server did not say.
	Total int64 `json:"total"`
	// Synced is how many bytes of the partial file were fsynced: after a
	// machine restart, an attempt resumes from there.
	Synced int64 `json:"synced"`
	// Boot is the kernel boot that wrote the partial file (boot.ID):
	// while it is the same, every byte written is there (a killed
	// process loses nothing the kernel took), so an attempt resumes from
	// the file's size.
	Boot string `json:"boot,omitempty"`
	// Name is the final name of a directory destination's file.
	Name string `json:"name,omitempty"`
	// Encoding is the response's Content-Encoding, "" for identity.
	Encoding string `json:"encoding,omitempty"`
	// SHA256 is the object's SHA-256 (hex) that an S3 store offered
	// (x-amz-checksum-sha256): the file is checked against it.
	SHA256 string `json:"sha256,omitempty"`
}

// setURL records raw, the URL the partial file is downloaded from (u,
// parsed), in m: its redacted form and a salted hash of it.
func (m *meta) setURL(raw string, u *url.URL) {
	m.URL, m.URLSalt = httpreq.Redact(u), rand.Text()
	m.URLHash = urlHash(m.URLSalt, raw)
}

// urlHash is the hex SHA-256 of salt and raw.
func urlHash(salt, raw string) string {
	h := sha256.New()
	h.Write([]byte("redrive download sidecar\x00"))
	h.Write([]byte(salt))
	h.Write([]byte{0})
	h.Write([]byte(raw))
	return hex.EncodeToString(h.Sum(nil))
}

// from reports whether the partial file m describes was downloaded from
// raw.
func (m *meta) from(raw string) bool {
	if m.URLHash == "" {
		// Written before the hash: the URL is kept whole.
		return m.URL == raw
	}
	return subtle.ConstantTimeCompare([]byte(m.URLHash), []byte(urlHash(m.URLSalt, raw))) == 1
}

// validator is the If-Range value of m: its strong ETag, else its
// Last-Modified.
func (m *meta) validator() string {
	if m.ETag != "" {
		return m.ETag
	}
	return m.LastModified
}

// encoding is resp's Content-Encoding, lower case, "" for identity.
func encoding(resp *http.Response) string {
	e := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	if e == "identity" {
		return ""
	}
	return e
}

// sameVersion reports whether a 206 is a part of the file the partial
// file holds the start of: the sidecar's validator repeated (a 206 must
// carry the ETag a 200 would, RFC 9110 15.3.7), and the same
// Content-Encoding. A server that honours Range but ignores If-Range
// would otherwise append a changed file's bytes to the old ones.
func sameVersion(m *meta, resp *http.Response) bool {
	if m.ETag != "" {
		if resp.Header.Get("ETag") != m.ETag {
			return false
		}
	} else if resp.Header.Get("Last-Modified") != m.LastModified {
		return false
	}
	return encoding(resp) == m.Encoding
}

// attempt is one attempt of a download job.
type attempt struct {
	h        *Handler
	pl       *plan
	br       *breaker.Breaker
	part     string // the partial file
	metaPath string // its sidecar
	// f is the partial file, open and locked from open to end: no other
	// attempt (of this job, run twice at once) writes it meanwhile.
	f      *os.File
	unlock func()
	// anon is set for a job without id or idempotency key: no later
	// attempt can find its working files, which go when it ends.
	anon bool
	// probed is set once the end of a close-delimited body was checked.
	probed bool
	// moved counts the bytes received, and read back from the partial
	// file to hash it: the progress the stall watchdog checks.
	moved atomic.Int64
}

// errStalled is the cause of an attempt's context that the stall
// watchdog ended.
var errStalled = errors.New("too little progress")

// watch ends ctx (cause errStalled) when fewer than Options.StallBytes
// move in a Options.StallTimeout; the returned func stops it.
func (a *attempt) watch(cancel context.CancelCauseFunc) (stop func()) {
	if a.h.opts.StallTimeout < 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(a.h.opts.StallTimeout)
		defer t.Stop()
		last := int64(0)
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := a.moved.Load()
				if n-last < a.h.opts.StallBytes {
					cancel(errStalled)
					return
				}
				last = n
			}
		}
	}()
	return func() { close(done) }
}

// stalled is the failure of an attempt the watchdog ended.
func (a *attempt) stalled(what string, err error) error {
	return classed(failure.Transient, ReasonStalled,
		fmt.Errorf("download: GET %s: %s: fewer than %d bytes in %s: %w", httpreq.Redact(a.pl.u), what,
			a.h.opts.StallBytes, a.h.opts.StallTimeout, err))
}

// countingWriter counts what goes through it into n.
type countingWriter struct{ n *atomic.Int64 }

func (c countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// errInUse is lockPart's refusal: another attempt holds the file.
var errInUse = errors.New("the partial file is locked by another attempt")

// Handle performs one attempt of a download job (see the package
// documentation).
func (h *Handler) Handle(ctx context.Context, job *redrive.Job) error {
	var secrets []string
	if len(job.Payload) > 0 {
		_, secrets = h.redactor.Payload(Kind, job.Payload)
	}
	err := h.handle(ctx, job)
	if err != nil {
		// The keys of an S3 source, whatever error (a proxy's, a
		// transport's) would echo them.
		if pl, perr := h.parse(job.Payload); perr == nil && pl.s3 != nil {
			secrets = append(secrets, pl.s3.secrets()...)
		}
	}
	return redact.Error(err, secrets)
}

// handle is Handle, its error not yet masked.
func (h *Handler) handle(ctx context.Context, job *redrive.Job) error {
	pl, err := h.parse(job.Payload)
	if err != nil {
		return redrive.Permanent(fmt.Errorf("download: %w", err))
	}
	// The engine's retry and DLQ log lines name the source (without
	// credentials or query) and the destination.
	redrive.LogWith(ctx, "url", httpreq.Redact(pl.u), "dest", pl.p.Dest)
	h.maybeSweep()
	br := h.opts.Breakers.Get(DiskBreaker)
	// Not even a request while the disk is known to be full: the engine
	// defers the job without using an attempt. The breaker says whether
	// its break is over, by its own clock.
	if ready := br.ReadyAt(); !ready.IsZero() {
		return &breaker.OpenError{Name: br.Name(), ReadyAt: ready}
	}
	jobCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, pl.timeout)
	defer cancel()
	if err := os.MkdirAll(pl.dir, 0o755); err != nil {
		return fileError("create the directory of "+pl.p.Dest, err)
	}
	// Checked again now that the directories exist.
	if err := h.checkSymlinks(pl.dir, pl.p.Dest); err != nil {
		return redrive.Permanent(&redrive.FieldError{Field: "payload.dest", Err: &invalid{err}})
	}
	key, anon := jobKey(job)
	a := &attempt{h: h, pl: pl, br: br, anon: anon}
	if pl.name != "" {
		if fi, err := os.Stat(filepath.Join(pl.dir, pl.name)); err == nil && fi.IsDir() {
			return classed(failure.Permanent, ReasonUnwritable,
				fmt.Errorf("download: dest %q is a directory", pl.p.Dest))
		}
		a.part = filepath.Join(pl.dir, partName(pl.name, key))
	} else {
		a.part = filepath.Join(pl.dir, ".redrive-"+key+".part")
	}
	a.metaPath = strings.TrimSuffix(a.part, ".part") + ".meta"
	if err := a.open(); err != nil {
		return err
	}
	ctx, stall := context.WithCancelCause(ctx)
	defer stall(nil)
	stopWatch := a.watch(stall)
	err = a.run(ctx)
	stopWatch()
	a.end(jobCtx, job, err)
	return err
}

// open opens and locks the partial file, creating it empty when missing.
// Something other than a regular file in its place (a symbolic link) is
// removed, not followed. An attempt of the same job that holds it is a
// transient failure (ReasonInUse): two attempts at once (a lease that
// expired while its handler ran) never write one file.
func (a *attempt) open() error {
	for range 3 {
		if fi, err := os.Lstat(a.part); err == nil && !fi.Mode().IsRegular() {
			if err := os.Remove(a.part); err != nil {
				return fileError("remove what is in the place of the partial file of "+a.pl.p.Dest, err)
			}
		}
		f, err := openPart(a.part)
		if err != nil {
			return fileError("create the partial file of "+a.pl.p.Dest, err)
		}
		unlock, err := lockPart(f)
		if err != nil {
			f.Close()
			if errors.Is(err, errInUse) {
				return classed(failure.Transient, ReasonInUse,
					fmt.Errorf("download: %s: another attempt of this job is writing it: %w", a.pl.p.Dest, err))
			}
			return fileError("lock the partial file of "+a.pl.p.Dest, err)
		}
		// Between the open and the lock, the attempt that held the lock
		// may have renamed or removed the file: lock the one at the path.
		if a.holds(f) {
			a.f, a.unlock = f, unlock
			return nil
		}
		unlock()
		f.Close()
	}
	return classed(failure.Transient, ReasonInUse,
		fmt.Errorf("download: %s: the partial file keeps being replaced by another attempt", a.pl.p.Dest))
}

// holds reports whether the partial file's path names f.
func (a *attempt) holds(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	li, err := os.Lstat(a.part)
	return err == nil && os.SameFile(fi, li)
}

// end closes and unlocks the partial file after an attempt of job that
// returned err. The working files are removed when no later attempt will
// resume them: the job has no identity, a user canceled it, its failure
// is final (permanent, needs_auth, or the last retry of its policy when
// the handler knows the worker's policies), or nothing was written. A
// shutdown or a breaker's deferral, which use no attempt, keep them.
func (a *attempt) end(jobCtx context.Context, job *redrive.Job, err error) {
	if a.f == nil {
		return
	}
	defer func() {
		a.unlock()
		a.f.Close()
		a.f = nil
	}()
	if err == nil {
		return // renamed to its final name
	}
	if _, deferred := errors.AsType[*breaker.OpenError](err); deferred || errors.Is(context.Cause(jobCtx), redrive.ErrShutdown) {
		return
	}
	v := failure.Classify(err)
	last := !v.Class.Retryable()
	if a.h.policyFor != nil && !last {
		last = max(job.Attempt, 1) > a.h.policyFor(job).MaxRetries
	}
	empty := false
	if fi, serr := a.f.Stat(); serr == nil && fi.Size() == 0 {
		empty = true
	}
	if a.anon || empty || last || errors.Is(context.Cause(jobCtx), redrive.ErrJobCanceled) {
		a.remove()
	}
}

// remove removes the working files: the partial file while the attempt
// holds it at its path, and the sidecar.
func (a *attempt) remove() {
	if a.f != nil && a.holds(a.f) {
		os.Remove(a.part)
	}
	os.Remove(a.metaPath)
	os.Remove(a.metaPath + ".tmp")
}

// partName is the name of the partial file of name for a job.
func partName(name, key string) string {
	p := "." + name + ".redrive-" + key + ".part"
	if len(p) > 240 {
		sum := sha256.Sum256([]byte(name))
		p = "." + hex.EncodeToString(sum[:8]) + ".redrive-" + key + ".part"
	}
	return p
}

func (a *attempt) run(ctx context.Context) error {
	if a.pl.name != "" {
		if err := a.refuseExisting(a.pl.name); err != nil {
			return err
		}
	}
	m, offset := a.resumable()
	for range 2 {
		resp, err := a.get(ctx, m, offset)
		if err != nil {
			return err
		}
		switch {
		case resp.StatusCode == http.StatusPartialContent && offset > 0:
			start, _, total, ok := contentRange(resp.Header.Get("Content-Range"))
			if !ok || start != offset || (m.Total >= 0 && total >= 0 && total != m.Total) || !sameVersion(m, resp) {
				// Not the bytes asked for, or of another version or
				// encoding of the file: start over.
				resp.Body.Close()
				a.discard()
				m, offset = nil, 0
				continue
			}
			if total >= 0 {
				m.Total = total
			}
			return a.write(ctx, resp, m, offset)
		case resp.StatusCode == http.StatusOK:
			m = &meta{Source: a.pl.p.Source, LastModified: resp.Header.Get("Last-Modified"),
				Total: resp.ContentLength, Encoding: encoding(resp)}
			if a.pl.s3 != nil {
				m.SHA256 = checksumSHA256(resp)
			}
			if et := resp.Header.Get("ETag"); !strings.HasPrefix(et, "W/") {
				m.ETag = et // weak ETags cannot be used in If-Range
			}
			if resp.Uncompressed {
				m.Total = -1
			}
			if m.validator() == "" || (a.pl.s3 != nil && m.ETag == "") {
				a.h.log.Info("download: the server sends no strong ETag and no Last-Modified (an S3 store, no ETag): if this attempt is interrupted, the next one starts over from byte 0",
					"partial_file", filepath.Base(a.part), "url", httpreq.Redact(a.pl.u))
			}
			m.setURL(a.pl.p.URL, a.pl.u)
			switch {
			case a.pl.name != "":
			case a.pl.s3 != nil:
				// The key's last segment, as the job names it: not a
				// Content-Disposition whoever uploaded the object chose.
				m.Name = urlName(a.pl.u)
			default:
				m.Name = fileName(resp, a.pl.u)
			}
			return a.write(ctx, resp, m, 0)
		case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && offset > 0:
			_, _, total, _ := contentRange(resp.Header.Get("Content-Range"))
			resp.Body.Close()
			if offset == m.Total || (m.Total < 0 && offset == total) {
				return a.complete(ctx, m, offset)
			}
			a.discard()
			m, offset = nil, 0
			continue
		case resp.StatusCode == http.StatusPreconditionFailed && offset > 0 && a.pl.s3 != nil:
			// If-Match failed: the object was replaced since the partial
			// file began. Never append another version's bytes.
			resp.Body.Close()
			a.h.log.Info("download: the object changed since the partial file began (ETag): starting over from byte 0",
				"partial_file", filepath.Base(a.part), "url", httpreq.Redact(a.pl.u), "partial_bytes", offset, "etag", m.ETag)
			a.discard()
			m, offset = nil, 0
			continue
		}
		defer resp.Body.Close()
		if a.pl.s3 != nil && resp.StatusCode >= 300 {
			err := s3Failure(resp, "download: GET "+httpreq.Redact(a.pl.u), a.pl.s3.secrets())
			if v := failure.Classify(err); v.Class == failure.Permanent || v.Class == failure.NeedsAuth {
				a.discard()
			}
			return err
		}
		if err := failure.FromResponse(resp); err != nil {
			if v := failure.Classify(err); v.Class == failure.Permanent || v.Class == failure.NeedsAuth {
				a.discard() // the job is over: no partial file left behind
			}
			return err
		}
		// 1xx, 3xx (a redirect not followed) or a 206 not asked for: not
		// a success, and no class in the status table (Unknown).
		buf := make([]byte, failure.MaxBodyExcerpt)
		n, _ := io.ReadFull(resp.Body, buf)
		return &failure.StatusError{Code: resp.StatusCode, Status: resp.Status, Body: string(buf[:n])}
	}
	return classed(failure.Transient, "range_refused",
		fmt.Errorf("download: GET %s: the server answered neither the range asked for nor the whole file", httpreq.Redact(a.pl.u)))
}

// resumable returns the sidecar of a partial file this attempt can
// resume, and the offset to resume from; or nil and 0 (and no partial
// file left) when it must start over.
func (a *attempt) resumable() (*meta, int64) {
	fi, err := a.f.Stat()
	if err != nil || fi.Size() == 0 {
		a.discard()
		return nil, 0
	}
	m, err := a.readMeta()
	if err != nil {
		a.cannotResume(fi.Size(), "its sidecar is missing or unreadable", err)
		a.discard()
		return nil, 0
	}
	have := m.Synced
	if m.Boot != "" && m.Boot == boot.ID() {
		// The machine has not restarted since these bytes were written:
		// the kernel has them all, synced or not.
		have = fi.Size()
	}
	switch {
	case !m.from(a.pl.p.URL) || m.Source != a.pl.p.Source:
		a.cannotResume(fi.Size(), "it was downloaded from another URL", nil)
	case m.validator() == "":
		a.cannotResume(fi.Size(), "the server gave no strong ETag and no Last-Modified, without which appending could mix two versions of the file", nil)
	case a.pl.s3 != nil && m.ETag == "":
		// An S3 resume is checked by If-Match, which needs the ETag:
		// Last-Modified, to the second, does not tell an object
		// replaced within that second.
		a.cannotResume(fi.Size(), "the store gave no ETag, without which appending could mix two versions of the object", nil)
	}
	if !m.from(a.pl.p.URL) || m.Source != a.pl.p.Source || m.validator() == "" || (a.pl.s3 != nil && m.ETag == "") ||
		have <= 0 || fi.Size() < have ||
		(m.Total >= 0 && have > m.Total) || !fi.Mode().IsRegular() ||
		// The name of a directory destination's file is read back from
		// disk: it must be a name sanitize would give, never a path.
		(a.pl.name == "" && !safeName(m.Name)) || (a.pl.name != "" && m.Name != "") {
		a.discard()
		return nil, 0
	}
	if fi.Size() > have {
		// After a restart, bytes written after the last checkpoint may
		// not have reached the disk intact.
		if err := a.f.Truncate(have); err != nil {
			a.discard()
			return nil, 0
		}
	}
	if m.URLHash == "" {
		// A sidecar written before the URL was hashed holds it whole:
		// rewritten now without its secrets (kept as it is should
		// that fail; the next checkpoint writes it again).
		m.setURL(a.pl.p.URL, a.pl.u)
		_ = a.saveMeta(m)
	}
	return m, have
}

// cannotResume logs that the partial file of size bytes is started over,
// and why.
func (a *attempt) cannotResume(size int64, why string, err error) {
	args := []any{"partial_file", filepath.Base(a.part), "url", httpreq.Redact(a.pl.u), "partial_bytes", size, "reason", why}
	if err != nil {
		args = append(args, "error", err)
	}
	a.h.log.Warn("download: cannot resume: starting over from byte 0", args...)
}

// refuseExisting is the failure of a payload with "overwrite": false
// whose final file name exists; nil otherwise.
func (a *attempt) refuseExisting(name string) error {
	if a.pl.p.Overwrite == nil || *a.pl.p.Overwrite {
		return nil
	}
	final := filepath.Join(a.pl.dir, name)
	if _, err := os.Lstat(final); err != nil {
		return nil
	}
	return a.existsError(final)
}

// existsError is the permanent failure of a final file that exists.
func (a *attempt) existsError(final string) error {
	a.discard()
	rel, err := filepath.Rel(a.h.root, final)
	if err != nil {
		rel = final
	}
	return classed(failure.Permanent, ReasonExists,
		fmt.Errorf("download: %s already exists in the download directory and the payload says \"overwrite\": false (remove it, or give another dest)", filepath.ToSlash(rel)))
}

func (a *attempt) readMeta() (*meta, error) {
	b, err := os.ReadFile(a.metaPath)
	if err != nil {
		return nil, err
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// saveMeta replaces the sidecar atomically.
func (a *attempt) saveMeta(m *meta) error {
	m.Boot = boot.ID()
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := a.metaPath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, a.metaPath)
}

// discard empties the partial file and removes its sidecar: the attempt
// starts over (end removes the files of an attempt that stops there).
func (a *attempt) discard() {
	a.f.Truncate(0)
	os.Remove(a.metaPath)
	os.Remove(a.metaPath + ".tmp")
}

// get sends the attempt's request, asking for the bytes from offset on
// when there is a partial file.
func (a *attempt) get(ctx context.Context, m *meta, offset int64) (*http.Response, error) {
	if a.pl.s3 != nil {
		return a.getS3(ctx, m, offset)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.pl.u.String(), nil)
	if err != nil {
		return nil, redrive.Permanent(fmt.Errorf("download: %w", err))
	}
	req.Header = a.pl.header.Clone()
	if a.pl.host != "" {
		req.Host = a.pl.host
	}
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
		req.Header.Set("If-Range", m.validator())
	}
	if !a.h.opts.NoTraceParent {
		tracectx.SetHeader(ctx, req.Header)
	}
	return a.do(ctx, a.h.client, req)
}

// getS3 sends the signed GET of an s3:// object, from offset on while its
// ETag is the sidecar's when offset > 0.
func (a *attempt) getS3(ctx context.Context, m *meta, offset int64) (*http.Response, error) {
	header := a.pl.header.Clone()
	if !a.h.opts.NoTraceParent {
		tracectx.SetHeader(ctx, header)
	}
	etag := ""
	if offset > 0 {
		etag = m.ETag
	}
	req, err := a.pl.s3.request(ctx, offset, etag, header)
	if err != nil {
		// No keys (an environment variable gone, a credentials file
		// unreadable): the job cannot be signed.
		return nil, classed(failure.NeedsAuth, "no_credentials", fmt.Errorf("download: GET %s: %w", httpreq.Redact(a.pl.u), err))
	}
	return a.do(ctx, a.h.s3client, req)
}

// do sends req with client, classifying what keeps it from an answer.
func (a *attempt) do(ctx context.Context, client *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := client.Do(req)
	if err != nil {
		if be, ok := errors.AsType[*netguard.BlockedError](err); ok {
			return nil, redrive.Permanent(be)
		}
		if errors.Is(context.Cause(ctx), errStalled) {
			return nil, a.stalled("no response", err)
		}
		// An attempt that ran out of its own timeout is reported as such
		// (classified transient), rather than as a bare context error.
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return nil, fmt.Errorf("download: GET %s: no response within %s: %w", httpreq.Redact(a.pl.u), a.pl.timeout, err)
		}
		return nil, err // *url.Error: the failure package classifies what it wraps
	}
	return resp, nil
}

// tooLarge is the permanent failure of a file above max_bytes; the
// partial file is removed.
func (a *attempt) tooLarge(size int64, known bool) error {
	a.discard()
	what := "more than"
	if known {
		what = strconv.FormatInt(size, 10) + " bytes,"
	}
	return classed(failure.Permanent, ReasonTooLarge,
		fmt.Errorf("download: %s is %s above max_bytes %d", httpreq.Redact(a.pl.u), what, a.pl.maxBytes))
}

// write streams resp's body into the partial file from offset on, then
// completes the file.
func (a *attempt) write(ctx context.Context, resp *http.Response, m *meta, offset int64) (err error) {
	defer resp.Body.Close()
	if m.Total > a.pl.maxBytes {
		return a.tooLarge(m.Total, true)
	}
	// Only disk errors count against the disk breaker.
	tok, err := a.br.Allow()
	if err != nil {
		return err
	}
	var diskErr error
	defer func() { a.br.Record(tok, diskErr) }()
	fail := func(op string, e error) error {
		if diskFull(e) {
			diskErr = e
		}
		return fileError(op, e)
	}

	f := a.f
	var sum hash.Hash
	if a.hashes(m) {
		sum = sha256.New()
	}
	if offset > 0 {
		// The digest covers the whole file: the bytes already there first.
		if sum != nil {
			if _, err := io.Copy(io.MultiWriter(sum, countingWriter{&a.moved}), io.NewSectionReader(f, 0, offset)); err != nil {
				return fail("read the partial file", err)
			}
		}
	} else if err := f.Truncate(0); err != nil {
		return fail("truncate the partial file", err)
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fail("seek the partial file", err)
	}
	m.Synced = offset
	if err := a.saveMeta(m); err != nil {
		return fail("write the partial file's sidecar", err)
	}
	// checkpoint makes the bytes written so far durable and resumable.
	checkpoint := func(done int64) error {
		if err := f.Sync(); err != nil {
			return err
		}
		m.Synced = done
		return a.saveMeta(m)
	}

	var w io.Writer = f
	if a.h.wrapWriter != nil {
		w = a.h.wrapWriter(f)
	}
	done, synced := offset, offset
	buf := make([]byte, bufferSize)
	a.progress(ctx, done, m.Total)
	for {
		n, rerr := resp.Body.Read(buf)
		a.moved.Add(int64(n))
		if n > 0 {
			if done+int64(n) > a.pl.maxBytes {
				return a.tooLarge(done+int64(n), false)
			}
			if m.Total >= 0 && done+int64(n) > m.Total {
				// A body longer than the size announced (a 206 whose
				// Content-Length runs past its Content-Range): the
				// server's bytes cannot be trusted, none past the end
				// are written, and the next attempt starts over.
				a.discard()
				return classed(failure.Transient, "range_refused",
					fmt.Errorf("download: GET %s: the body runs past the %d bytes announced", httpreq.Redact(a.pl.u), m.Total))
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				checkpoint(done) // best effort: keep what is whole
				return fail("write "+a.pl.p.Dest, werr)
			}
			if sum != nil {
				sum.Write(buf[:n])
			}
			done += int64(n)
			a.progress(ctx, done, m.Total)
			if done-synced >= a.h.opts.CheckpointBytes {
				if err := checkpoint(done); err != nil {
					return fail("sync the partial file", err)
				}
				synced = done
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if err := checkpoint(done); err != nil && diskFull(err) {
				diskErr = err
			}
			return a.bodyError(ctx, done, rerr)
		}
	}
	if m.Total >= 0 && done != m.Total {
		checkpoint(done)
		return classed(failure.Transient, failure.ReasonConnectionReset,
			fmt.Errorf("download: GET %s: the body ended after %d of %d bytes", httpreq.Redact(a.pl.u), done, m.Total))
	}
	if m.Total < 0 && !a.probed && closeDelimited(resp) && m.validator() != "" && (a.pl.s3 == nil || m.ETag != "") {
		// The connection's close ended the body: a cut connection looks
		// the same. Ask for what follows.
		a.probed = true
		if err := checkpoint(done); err != nil {
			return fail("sync the partial file", err)
		}
		more, err := a.probeEnd(ctx, m, done)
		if err != nil {
			return err
		}
		if more != nil {
			return a.write(ctx, more, m, done)
		}
	}
	if err := f.Sync(); err != nil {
		return fail("sync "+a.pl.p.Dest, err)
	}
	a.progress(ctx, done, done)
	if err := a.finish(ctx, m, done, sum); err != nil {
		if fe, ok := errors.AsType[*failure.Error](err); ok && fe.Reason == ReasonDiskFull {
			diskErr = err
		}
		return err
	}
	return nil
}

// closeDelimited reports whether resp's body ends only with its
// connection: HTTP/1 without Content-Length or chunking.
func closeDelimited(resp *http.Response) bool {
	return resp.ProtoMajor == 1 && resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 && !resp.Uncompressed
}

// probeEnd checks that a close-delimited body of done bytes was whole, by
// asking for the bytes from done on: a 416 whose total is done (or not
// given), or a 200 (Range ignored) of done bytes or of unknown length,
// confirms it (nil, nil); a 206 of the same version from done is
// returned, its bytes to append; a 206 of another version, a 416 with
// another total or a 200 of another length is a transient failure (the
// next attempt resumes or starts over), and so is an answer the failure
// package would retry (5xx, 408, 429). Any other answer cannot tell, and
// the body is taken as whole, as the server sent it.
func (a *attempt) probeEnd(ctx context.Context, m *meta, done int64) (*http.Response, error) {
	resp, err := a.get(ctx, m, done)
	if err != nil {
		return nil, err
	}
	cut := func() (*http.Response, error) {
		return nil, classed(failure.Transient, failure.ReasonConnectionReset,
			fmt.Errorf("download: GET %s: the body ended with its connection after %d bytes, short of the whole file",
				httpreq.Redact(a.pl.u), done))
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, _, total, ok := contentRange(resp.Header.Get("Content-Range"))
		if ok && start == done && sameVersion(m, resp) {
			if total >= 0 {
				m.Total = total
			}
			return resp, nil
		}
		resp.Body.Close()
		return cut()
	case http.StatusRequestedRangeNotSatisfiable:
		_, _, total, _ := contentRange(resp.Header.Get("Content-Range"))
		resp.Body.Close()
		if total >= 0 && total != done {
			return cut()
		}
		return nil, nil
	case http.StatusOK:
		// Range ignored: the whole file again, whose length, when
		// given, says whether the body was whole.
		resp.Body.Close()
		if resp.ContentLength >= 0 && resp.ContentLength != done {
			return cut()
		}
		return nil, nil
	}
	defer resp.Body.Close()
	if err := failure.FromResponse(resp); err != nil && failure.Classify(err).Class.Retryable() {
		// The server could not answer now: the end is not confirmed,
		// and the next attempt resumes from it and asks again.
		return nil, err
	}
	return nil, nil
}

// bodyError classifies an error reading the body: what the failure
// package does not know is a dropped connection, transient; the next
// attempt resumes.
func (a *attempt) bodyError(ctx context.Context, done int64, err error) error {
	if errors.Is(context.Cause(ctx), errStalled) {
		return a.stalled(fmt.Sprintf("the body stalled after %d bytes", done), err)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return fmt.Errorf("download: GET %s: body not complete within %s, %d bytes in: %w", httpreq.Redact(a.pl.u), a.pl.timeout, done, err)
	}
	err = fmt.Errorf("download: GET %s: the body broke off after %d bytes: %w", httpreq.Redact(a.pl.u), done, err)
	if failure.Classify(err).Class == failure.Unknown {
		return classed(failure.Transient, failure.ReasonConnectionReset, err)
	}
	return err
}

// complete finishes a partial file that already holds every byte (a 416
// answer to a range from its end).
func (a *attempt) complete(ctx context.Context, m *meta, size int64) error {
	var sum hash.Hash
	if a.hashes(m) {
		sum = sha256.New()
		if _, err := io.Copy(io.MultiWriter(sum, countingWriter{&a.moved}), io.NewSectionReader(a.f, 0, size)); err != nil {
			return fileError("read the partial file", err)
		}
	}
	if size > a.pl.maxBytes {
		return a.tooLarge(size, true)
	}
	a.progress(ctx, size, size)
	return a.finish(ctx, m, size, sum)
}

// finish checks the digest of the synced, closed partial file and renames
// it to its final name.
func (a *attempt) finish(ctx context.Context, m *meta, size int64, sum hash.Hash) error {
	digest := ""
	if sum != nil {
		digest = hex.EncodeToString(sum.Sum(nil))
	}
	if a.pl.sha != "" && digest != a.pl.sha {
		a.discard()
		return classed(failure.Permanent, ReasonChecksumMismatch,
			fmt.Errorf("download: %s: sha256 %s, want %s", httpreq.Redact(a.pl.u), digest, a.pl.sha))
	}
	if m.SHA256 != "" && digest != m.SHA256 {
		// The bytes are not the object the store has: fetch it again.
		a.discard()
		return classed(failure.Transient, ReasonChecksumMismatch,
			fmt.Errorf("download: %s: sha256 %s, but the store's checksum of the object is %s", httpreq.Redact(a.pl.u), digest, m.SHA256))
	}
	name := a.pl.name
	if name == "" {
		name = m.Name
	}
	final := filepath.Join(a.pl.dir, name)
	// The final file is in the destination's directory, under the
	// download directory, and is not a working file, whatever the name
	// came from.
	if (a.pl.name == "" && !safeName(name)) || isWorkName(name) || filepath.Dir(final) != a.pl.dir || !within(a.h.root, final) {
		a.discard()
		return classed(failure.Permanent, ReasonUnwritable,
			fmt.Errorf("download: refusing the file name %q: not a single name inside the directory of dest %q", name, a.pl.p.Dest))
	}
	// What is renamed is the file this attempt wrote and hashed, whole.
	if fi, err := a.f.Stat(); err != nil || fi.Size() != size || !a.holds(a.f) {
		a.discard()
		return classed(failure.Transient, ReasonInUse,
			fmt.Errorf("download: %s: the partial file changed under the attempt (%d bytes written)", a.pl.p.Dest, size))
	}
	if a.pl.p.Overwrite != nil && !*a.pl.p.Overwrite {
		// A link never replaces a file: whatever appeared at the final
		// name since the attempt began is kept.
		if err := os.Link(a.part, final); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return a.existsError(final)
			}
			err = fileError("link to "+name, err)
			if failure.Classify(err).Class == failure.Permanent {
				a.discard()
			}
			return err
		}
		os.Remove(a.part)
	} else if err := os.Rename(a.part, final); err != nil {
		err = fileError("rename to "+name, err)
		if failure.Classify(err).Class == failure.Permanent {
			a.discard()
		}
		return err
	}
	os.Remove(a.metaPath)
	if err := syncDir(a.pl.dir); err != nil {
		return fileError("sync the directory of "+name, err)
	}
	rel, err := filepath.Rel(a.h.root, final)
	if err != nil {
		rel = final
	}
	note := fmt.Sprintf("%d bytes to %s", size, filepath.ToSlash(rel))
	if digest != "" {
		note += ", sha256 " + digest
	}
	redrive.Record(ctx, ReasonDownloaded, note)
	return nil
}

// hashes reports whether the attempt hashes the file: when the payload
// or the store gives a digest to check, or Options.RecordSHA256 asks to
// record one.
func (a *attempt) hashes(m *meta) bool {
	return a.pl.sha != "" || (m != nil && m.SHA256 != "") || a.h.opts.RecordSHA256
}

// syncDir makes a rename in dir durable. File systems that cannot sync a
// directory are not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) &&
		!errors.Is(err, os.ErrPermission) {
		return err
	}
	return nil
}

// progress reports how far the download is (total -1 when unknown) to
// the engine, which shows it on the job while it runs. redrive.Progress
// only stores the two numbers, so it is called per buffer copied.
func (a *attempt) progress(ctx context.Context, done, total int64) {
	redrive.Progress(ctx, done, total)
}

// contentRange parses "bytes <start>-<end>/<total>" or "bytes */<total>";
// a missing part is -1, total "*" too.
func contentRange(s string) (start, end, total int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return -1, -1, -1, false
	}
	rng, tot, found := strings.Cut(strings.TrimSpace(rest), "/")
	if !found {
		return -1, -1, -1, false
	}
	total = -1
	if tot != "*" {
		n, err := strconv.ParseInt(tot, 10, 64)
		if err != nil || n < 0 {
			return -1, -1, -1, false
		}
		total = n
	}
	if rng == "*" {
		return -1, -1, total, true
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return -1, -1, -1, false
	}
	start, err1 := strconv.ParseInt(a, 10, 64)
	end, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < start || (total >= 0 && end >= total) {
		return -1, -1, -1, false
	}
	return start, end, total, true
}
