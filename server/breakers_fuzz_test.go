package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzBreakerOpen posts arbitrary names and bodies to the force-open and
// reset routes: never a 5xx, errors in the JSON shape, and a breaker forced
// open with a duration is open until about now + that duration.
func FuzzBreakerOpen(f *testing.F) {
	for _, s := range []struct{ name, body string }{
		{"payments", `{"duration":"15m"}`},
		{"payments", `{}`},
		{"payments", ``},
		{"api.example.com:443", `{"duration":"1h30m"}`},
		{"x", `{"duration":"0s"}`},
		{"x", `{"duration":"-5m"}`},
		{"x", `{"duration":"9000h"}`},
		{"x", `{"duration":"soon"}`},
		{"x", `{"duration":15}`},
		{"x", `{"until":"1m"}`},
		{"x", `{"duration":"1m"} {}`},
		{"..", `{"duration":"1m"}`},
		{"ünï cödé", `{"duration":"1ms"}`},
		{"a\x00b", `{}`},
		{"", `{}`},
	} {
		f.Add(s.name, []byte(s.body), true)
		f.Add(s.name, []byte(s.body), false)
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, name string, body []byte, open bool) {
		action := "reset"
		if open {
			action = "open"
		}
		path := "/v1/breakers/" + url.PathEscape(name) + "/" + action
		if _, err := url.ParseRequestURI(path); err != nil || name == "" || name == "." || name == ".." {
			return // not a path a client can send to this route
		}
		start := time.Now()
		fuzzPost(t, h, path, body)
		// Read back what the route left.
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/breakers", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /v1/breakers: %d %s", rec.Code, rec.Body.Bytes())
		}
		var views []BreakerView
		if err := json.Unmarshal(rec.Body.Bytes(), &views); err != nil {
			t.Fatalf("GET /v1/breakers: %v", err)
		}
		var req breakerOpenRequest
		if !open || !utf8.ValidString(name) || json.Unmarshal(body, &req) != nil || req.Duration == "" {
			return
		}
		d, ok := ParseDuration(req.Duration)
		if !ok || d <= 0 || d > MaxForcedOpen {
			return
		}
		for _, v := range views {
			if v.Name == name && v.Forced && !v.ReadyAt.IsZero() {
				if v.ReadyAt.Before(start.Add(d).Add(-time.Second)) || v.ReadyAt.After(time.Now().Add(d).Add(time.Second)) {
					t.Fatalf("%s forced open for %v until %v (asked at %v)", name, d, v.ReadyAt, start)
				}
			}
		}
	})
}
