package tracectx

import (
	"net/url"
	"strings"
	"testing"
)

// TestCheckURLTemplate: the templates of real viewers pass; the rest are
// refused with a reason.
func TestCheckURLTemplate(t *testing.T) {
	for _, ok := range []string{
		"http://jaeger:16686/trace/{trace_id}",
		"https://grafana.example.com/explore?left=%7B%22queries%22%3A%5B%7B%22query%22%3A%22{trace_id}%22%7D%5D%7D",
		"https://tempo.example.com/trace/{trace_id}?from={trace_id}",
	} {
		if err := CheckURLTemplate(ok); err != nil {
			t.Errorf("CheckURLTemplate(%q) = %v, want nil", ok, err)
		}
	}
	for tmpl, want := range map[string]string{
		"":                                    "empty",
		" http://j/{trace_id}":                "white space",
		"http://jaeger:16686/trace/":          "lacks {trace_id}",
		"http://jaeger:16686/trace/{traceid}": "lacks {trace_id}",
		"http://j/{trace_id}/{span_id}":       "brace",
		"javascript:alert({trace_id})":        "not an http or https URL",
		"/trace/{trace_id}":                   "not an http or https URL",
		"http:///trace/{trace_id}":            "no host",
		"http://u:p@jaeger/trace/{trace_id}":  "user name or password",
		"http://jaeger/trace/{trace_id} x":    "space or a control",
		"http://jaeger:port/{trace_id}":       "not a URL",
		"http://jaeger/\x00{trace_id}":        "control",
	} {
		err := CheckURLTemplate(tmpl)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckURLTemplate(%q) = %v, want an error saying %q", tmpl, err, want)
		}
	}
}

// FuzzCheckURLTemplate: CheckURLTemplate never panics, and a template it
// accepts gives an absolute http(s) URL with a host for any trace id.
func FuzzCheckURLTemplate(f *testing.F) {
	for _, s := range []string{"http://jaeger:16686/trace/{trace_id}", "https://x/{trace_id}?a=b#c", "{trace_id}", "http://{trace_id}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		if CheckURLTemplate(tmpl) != nil {
			return
		}
		u, err := url.Parse(URLFor(tmpl, "4bf92f3577b34da6a3ce929d0e0e4736"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			t.Fatalf("accepted %q gives %v, %v", tmpl, u, err)
		}
	})
}
