package tracectx

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// TraceIDPlaceholder is what a trace viewer's URL template holds where a
// trace id goes.
const TraceIDPlaceholder = "{trace_id}"

// sampleTraceID stands for a trace id when a URL template is checked.
const sampleTraceID = "0af7651916cd43dd8448eb211c80319c"

// CheckURLTemplate returns why tmpl is not a usable URL template of a
// trace viewer (serve --trace-url-template), nil when it is: an absolute
// http or https URL with a host, holding TraceIDPlaceholder at least once
// and no other {placeholder}, that parses once the placeholder is
// replaced by a trace id.
func CheckURLTemplate(tmpl string) error {
	// The errors quote the template without what is before an @ in its
	// authority: the user name and password it may hold.
	return checkURLTemplate(tmpl, hideUser(tmpl))
}

// hideUser returns tmpl with any user information of its authority (from
// after "://" to the last "@" before the query) replaced by "•••": a
// password holding a "/" is hidden too, and a path holding an "@" is
// hidden with it, which an error message can afford.
func hideUser(tmpl string) string {
	scheme, rest, ok := strings.Cut(tmpl, "://")
	if !ok {
		return tmpl
	}
	end := strings.IndexAny(rest, "?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return tmpl
	}
	return scheme + "://•••" + rest[at:]
}

// checkURLTemplate is CheckURLTemplate, its errors quoting tmpl as shown.
func checkURLTemplate(tmpl, shown string) error {
	if strings.TrimSpace(tmpl) != tmpl || tmpl == "" {
		return errors.New("empty, or white space around it")
	}
	if !strings.Contains(tmpl, TraceIDPlaceholder) {
		return fmt.Errorf("%q lacks %s, where the trace id goes", shown, TraceIDPlaceholder)
	}
	rest := strings.ReplaceAll(tmpl, TraceIDPlaceholder, "")
	if strings.ContainsAny(rest, "{}") {
		return fmt.Errorf("%q holds a brace other than %s's (the only placeholder)", shown, TraceIDPlaceholder)
	}
	for _, r := range tmpl {
		if r < 0x21 || r == 0x7f {
			return fmt.Errorf("%q holds a space or a control character", shown)
		}
	}
	u, err := url.Parse(URLFor(tmpl, sampleTraceID))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // not the URL again, with the sample trace id
		}
		return fmt.Errorf("%q is not a URL: %w", shown, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q is not an http or https URL", shown)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", shown)
	}
	if u.User != nil {
		return fmt.Errorf("%q holds a user name or password, which every dashboard user would see", shown)
	}
	return nil
}

// URLFor returns the URL of the trace traceID by tmpl, a template
// CheckURLTemplate accepts.
func URLFor(tmpl, traceID string) string {
	return strings.ReplaceAll(tmpl, TraceIDPlaceholder, traceID)
}
