package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/strictjson"
	"github.com/redrivehq/redrive/store"
)

// decodeBody decodes the request body, bounded by maxBody, into v: one
// JSON value, sent with Content-Type: application/json and no
// Content-Encoding (415 otherwise), that means one thing only (package
// strictjson): keys match field names exactly, no key is unknown or given
// twice in any object (a job's payload included), no string holds a lone
// surrogate. Every handler that reads a body decodes it here.
func (a *api) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength != 0 { // an empty body is reported as such below
		if e := jsonContentType(r); e != nil {
			return e
		}
		if e := identityEncoding(r); e != nil {
			return e
		}
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	if err != nil {
		return a.decodeError(err)
	}
	return a.decodeStrict(raw, v)
}

// decodeStrict decodes raw, a whole body, into v as decodeBody does
// (its rules but the HTTP ones).
func (a *api) decodeStrict(raw []byte, v any) error {
	// encoding/json would replace invalid UTF-8 with U+FFFD silently:
	// a name or a payload would not be what the client sent.
	if !utf8.Valid(raw) {
		return &apiError{status: http.StatusBadRequest, code: "malformed_json", msg: "the body is not valid UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return a.decodeError(err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return a.decodeError(err)
		}
		return &apiError{status: http.StatusBadRequest, code: "malformed_json", msg: "the body holds data after its JSON value"}
	}
	if err := strictjson.Check(raw, reflect.TypeOf(v)); err != nil {
		return strictError(err)
	}
	return nil
}

// strictError explains an ambiguity strictjson found.
func strictError(err error) *apiError {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return &apiError{status: http.StatusBadRequest, code: "malformed_json", msg: "malformed JSON: " + err.Error()}
	}
	switch se.Problem {
	case strictjson.DuplicateKey:
		return &apiError{status: http.StatusBadRequest, code: "duplicate_key", field: se.Path, msg: se.Error()}
	case strictjson.UnknownKey:
		return &apiError{status: http.StatusBadRequest, code: "unknown_field", field: se.Path, msg: se.Error()}
	}
	return &apiError{status: http.StatusBadRequest, code: "malformed_json", field: se.Path, msg: se.Error()}
}

// identityEncoding refuses a body sent with a Content-Encoding (gzip,
// deflate...): the API reads bodies as they are, and a compressed body
// read as JSON would be refused as malformed or, worse, its size bound
// would not bound what it expands to.
func identityEncoding(r *http.Request) *apiError {
	for _, v := range r.Header.Values("Content-Encoding") {
		for e := range strings.SplitSeq(v, ",") {
			if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "identity") {
				return &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
					msg: "send the body uncompressed, without Content-Encoding (got " + quoteClip(v) + ")"}
			}
		}
	}
	return nil
}

// decodeError explains a decoding error.
func (a *api) decodeError(err error) *apiError {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return &apiError{status: http.StatusRequestEntityTooLarge, code: "body_too_large",
			msg: fmt.Sprintf("the body is larger than %d bytes", a.maxBody)}
	case errors.Is(err, io.EOF):
		return &apiError{status: http.StatusBadRequest, code: "malformed_json", msg: "the body is empty; send a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &apiError{status: http.StatusBadRequest, code: "malformed_json", msg: "the body ends in the middle of its JSON value"}
	case errors.As(err, &se):
		return &apiError{status: http.StatusBadRequest, code: "malformed_json", msg: fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)}
	case errors.As(err, &te):
		if te.Field == "" {
			return &apiError{status: http.StatusBadRequest, code: "invalid_type", msg: fmt.Sprintf("the body must be a JSON object, not %s", te.Value)}
		}
		return &apiError{status: http.StatusBadRequest, code: "invalid_type", field: te.Field,
			msg: fmt.Sprintf("field %s must be %s, not %s", te.Field, jsonTypeName(te.Type.String()), te.Value)}
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		return &apiError{status: http.StatusBadRequest, code: "unknown_field", field: f, msg: fmt.Sprintf("unknown field %q", f)}
	}
	return &apiError{status: http.StatusBadRequest, code: "malformed_json", msg: "malformed JSON: " + strings.TrimPrefix(msg, "json: ")}
}

// jsonTypeName names a Go type as a JSON type.
func jsonTypeName(t string) string {
	switch {
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "*int"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return "an object"
}

// checkName validates a short identifier-like string (kind, queue,
// dependency, reason): bounded, valid UTF-8, no control characters.
func checkName(field, v string, limit int) error {
	if len(v) > limit {
		return badRequest(field, "%s is %d bytes long, the limit is %d", field, len(v), limit)
	}
	if !utf8.ValidString(v) {
		return badRequest(field, "%s is not valid UTF-8", field)
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		return badRequest(field, "%s must not contain control characters", field)
	}
	return nil
}

// parseTime parses a since or until value (see ParseTime).
func parseTime(field, v string) (time.Time, error) {
	t, ok := ParseTime(v, time.Now())
	if !ok {
		return time.Time{}, badRequest(field, "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z or a duration back from now such as 30m, 1h or 7d, got %q", field, clip(v))
	}
	return t, nil
}

// ParseTime parses the since or until of a filter: an RFC 3339 time, or
// a duration back from now, a Go duration or a whole number of days
// ("30m", "1h", "7d": now minus that). The CLI parses them the same way.
func ParseTime(v string, now time.Time) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, true
	}
	d, ok := parseSince(v)
	if !ok || d < 0 {
		return time.Time{}, false
	}
	return now.Add(-d), true
}

// clip shortens a user value quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// parseState parses a state name.
func parseState(field, v string) (store.State, error) {
	st, err := store.ParseState(strings.TrimSpace(v))
	if err != nil {
		return "", badRequest(field, "unknown state %q (want pending, scheduled, running, completed, dead, canceled or blocked)", clip(v))
	}
	return st, nil
}

// parseClass checks a failure class name and returns its canonical form.
func parseClass(field, v string) (string, error) {
	c, err := failure.ParseClass(v)
	if err != nil {
		return "", badRequest(field, "unknown class %q (want unknown, transient, rate_limited, permanent or needs_auth)", clip(v))
	}
	return c.String(), nil
}

// query reads query parameters, refusing unknown and repeated ones so that
// a typo cannot silently widen a filter (a purge, above all).
type query struct {
	v url.Values
}

func newQuery(r *http.Request, allowed ...string) (*query, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("", "malformed query string: %v", err)
	}
	for k, vals := range v {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			return nil, badRequest(k, "unknown query parameter %q (allowed: %s)", clip(k), strings.Join(allowed, ", "))
		}
		if len(vals) > 1 && k != "state" {
			return nil, badRequest(k, "query parameter %s is given more than once", k)
		}
		for _, s := range vals {
			if len(s) > maxQueryValue {
				return nil, badRequest(k, "query parameter %s is %d bytes long, the limit is %d", k, len(s), maxQueryValue)
			}
		}
	}
	return &query{v: v}, nil
}

func (q *query) get(k string) string { return q.v.Get(k) }

// limit parses the limit parameter: 1..MaxPageSize, default store's.
func (q *query) limit() (int, error) {
	s := q.get("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxPageSize {
		return 0, badRequest("limit", "limit must be an integer from 1 to %d, got %q", MaxPageSize, clip(s))
	}
	return n, nil
}

// ids parses the comma-separated job ids of parameter k (id=11,12):
// positive, at most MaxRedriveIDs, duplicates
// dropped, in the order given.
func (q *query) ids(k string) ([]int64, error) {
	var ids []int64
	seen := map[int64]bool{}
	for _, v := range q.v[k] {
		for s := range strings.SplitSeq(v, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil || id <= 0 {
				return nil, badRequest(k, "job ids must be positive integers, got %q", clip(s))
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
			if len(ids) > MaxRedriveIDs {
				return nil, badRequest(k, "more than %d ids; purge by filter instead", MaxRedriveIDs)
			}
		}
	}
	return ids, nil
}

// filterParams are the query parameters of a DLQ filter; readParams
// those of a filter that selects jobs to read, not to change (an
// operation refuses an error prefix).
var (
	filterParams = []string{"queue", "kind", "class", "reason", "fingerprint", "since", "until", "q"}
	readParams   = append(slices.Clone(filterParams), "error_prefix")
)

// match adds the match parameter, payload.FIELD=VALUE (the CLI's --match,
// see store.ParsePayloadMatch), to f.
func (q *query) match(f *redrive.Filter) error {
	v := q.get("match")
	if v == "" {
		return nil
	}
	field, value, err := store.ParsePayloadMatch(v)
	if err != nil {
		return badRequest("match", "match %s", strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
	}
	f.PayloadField, f.PayloadValue = field, value
	return nil
}

// filter parses the filter parameters present in q.
func (q *query) filter() (redrive.Filter, error) {
	fq := FilterBody{
		Queue: q.get("queue"), Kind: q.get("kind"), Class: q.get("class"), Reason: q.get("reason"),
		Fingerprint: q.get("fingerprint"), Since: q.get("since"), Until: q.get("until"), Q: q.get("q"),
		ErrorPrefix: q.get("error_prefix"),
	}
	f, err := toFilter(fq, "")
	if err != nil {
		return f, err
	}
	for _, v := range q.v["state"] {
		for s := range strings.SplitSeq(v, ",") {
			st, err := parseState("state", s)
			if err != nil {
				return f, err
			}
			f.States = append(f.States, st)
		}
	}
	return f, nil
}

// FilterBody is a DLQ filter, as the filter of a redrive body or as
// query parameters. Times are RFC 3339.
// It is the type of package apiclient, the API's Go client.
type FilterBody = apiclient.FilterBody

// toFilter validates the input; prefix qualifies field names ("filter.").
func toFilter(in FilterBody, prefix string) (redrive.Filter, error) {
	var f redrive.Filter
	for _, c := range []struct {
		name, v string
		limit   int
	}{
		{"queue", in.Queue, maxName}, {"kind", in.Kind, maxName}, {"reason", in.Reason, maxName},
		{"fingerprint", in.Fingerprint, maxName}, {"q", in.Q, maxQueryValue}, {"error_prefix", in.ErrorPrefix, maxQueryValue},
	} {
		if err := checkName(prefix+c.name, c.v, c.limit); err != nil {
			return f, err
		}
	}
	f.Queue, f.Kind, f.Reason, f.Fingerprint, f.ErrorContains = in.Queue, in.Kind, in.Reason, in.Fingerprint, in.Q
	f.ErrorPrefix = in.ErrorPrefix
	if in.Class != "" {
		c, err := parseClass(prefix+"class", in.Class)
		if err != nil {
			return f, err
		}
		f.Class = c
	}
	var err error
	if in.Since != "" {
		if f.Since, err = parseTime(prefix+"since", in.Since); err != nil {
			return f, err
		}
	}
	if in.Until != "" {
		if f.Until, err = parseTime(prefix+"until", in.Until); err != nil {
			return f, err
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, badRequest(prefix+"until", "until must be after since")
	}
	return f, nil
}

// emptyFilter reports whether f selects every job.
func emptyFilter(f redrive.Filter) bool {
	return f.Queue == "" && f.Kind == "" && f.Class == "" && f.Reason == "" && f.Fingerprint == "" &&
		f.Since.IsZero() && f.Until.IsZero() && f.ErrorContains == "" && f.ErrorPrefix == "" && len(f.IDs) == 0 && len(f.States) == 0 && f.PayloadField == ""
}

// page reads cursor and limit, checking the cursor against the listing.
func (q *query) page(f redrive.Filter) (redrive.Page, error) {
	n, err := q.limit()
	if err != nil {
		return redrive.Page{}, err
	}
	c := q.get("cursor")
	if c != "" {
		if _, _, err := store.DecodeCursor(c, f.DeadOnly()); err != nil {
			return redrive.Page{}, badRequest("cursor", "malformed cursor: pass the next value of the previous page unchanged, with the same filter")
		}
	}
	return redrive.Page{Cursor: c, Limit: n}, nil
}

// parseRate checks a redrive rate.
func parseRate(r float64) error {
	if math.IsNaN(r) || r < 0 || r > MaxRate || (r > 0 && r < MinRate) {
		return badRequest("rate", "rate must be 0 (no bound) or from %g to %g jobs per second", MinRate, float64(MaxRate))
	}
	return nil
}
