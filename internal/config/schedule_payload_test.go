package config

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/httpjob"
)

// TestSchedulePayloadChecked: a schedule whose payload its kind refuses
// (an ftp:// URL, a download's dest outside the directory, an unknown
// field) is refused by the configuration's check, naming the schedule,
// with the kind's own message, the one serve would stop with at start.
func TestSchedulePayloadChecked(t *testing.T) {
	dir := t.TempDir()
	httpCheck := httpjob.New(httpjob.Options{BlockPrivate: true, AllowLinkLocalSetting: "--http-allow-link-local", AllowPrivateSetting: "--http-allow-private"}).Validate
	dl, err := download.New(download.Options{Dir: dir, BlockPrivate: true, AllowLinkLocalSetting: "--http-allow-link-local", AllowPrivateSetting: "--http-allow-private"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, kind, payload string
		check               func(json.RawMessage) error
	}{
		{name: "ftp", kind: "http", payload: `{"url":"ftp://files.example/a"}`, check: httpCheck},
		{name: "http unknown field", kind: "http", payload: `{"url":"https://a.example","methd":"POST"}`, check: httpCheck},
		{name: "http no url", kind: "http", payload: `{}`, check: httpCheck},
		{name: "download ftp", kind: "download", payload: `{"url":"ftp://files.example/a"}`, check: dl.Validate},
		{name: "download outside", kind: "download", payload: `{"url":"https://files.example/a","dest":"../../etc/x"}`, check: dl.Validate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.check(json.RawMessage(tc.payload))
			if want == nil {
				t.Fatalf("the kind accepts %s", tc.payload)
			}
			file := `{"addr":"0.0.0.0:8080","token":"t","download-dir":` + strconvQuote(dir) + `,"schedules":{"nightly":{"every":"1h","kind":"` + tc.kind + `","payload":` + tc.payload + `}}}`
			_, err := loadConfig(t, nil, "--config", writeFile(t, "c.json", file))
			if err == nil || !strings.Contains(err.Error(), `schedule "nightly"`) || !strings.Contains(err.Error(), want.Error()) {
				t.Fatalf("err = %v, want one naming the schedule and saying %q", err, want)
			}
		})
	}
	// A valid payload passes.
	file := `{"schedules":{"ok":{"every":"1h","kind":"http","payload":{"url":"https://a.example/x"}}}}`
	if _, err := loadConfig(t, nil, "--config", writeFile(t, "c.json", file)); err != nil {
		t.Fatal(err)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
