package tracectx

import (
	"strings"
	"testing"
)

// TestCheckURLTemplateHidesPassword: CheckURLTemplate refuses a template
// with a user name or password because every dashboard user would see
// it; its errors, which serve prints and logs, do not show it either,
// whatever else is wrong with the template.
func TestCheckURLTemplateHidesPassword(t *testing.T) {
	for _, tmpl := range []string{
		"https://ann:s3cret@jaeger:16686/trace/{trace_id}",
		"https://ann:s3cret@jaeger:16686/trace/",
		"https://ann:s3cret@jaeger:16686/{trace_id}/{span_id}",
		"ftp://ann:s3cret@jaeger/{trace_id}",
		"https://ann:s3cret@jaeger/a b/{trace_id}",
		"https://ann:s3cret@jaeger:99x/{trace_id}",
		"https://ann:s3/cret@jaeger/{trace_id}",
	} {
		err := CheckURLTemplate(tmpl)
		if err == nil {
			t.Fatalf("CheckURLTemplate(%q) = nil, want an error", tmpl)
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "s3/cret") {
			t.Errorf("CheckURLTemplate(%q): the error shows the password: %v", tmpl, err)
		}
	}
}
