package config

import (
	"strings"
	"testing"
)

// TestConfigFileStrict: a config file means one thing only. A key given
// twice (at any depth, a schedule's payload included), a key of an
// object in another case and a lone surrogate are refused, naming the
// key; so are the same in a JSON setting given by flag or variable.
func TestConfigFileStrict(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		args       []string
		want       string
	}{
		{name: "duplicate setting", file: `{"workers":2,"workers":3}`, want: `key "workers" is given more than once`},
		{name: "duplicate in retry", file: `{"retry":{"max_retries":2,"max_retries":3}}`, want: `"retry.max_retries" is given more than once`},
		{name: "duplicate in a schedule's payload", file: `{"schedules":{"s":{"every":"1m","kind":"http","payload":{"url":"https://a.example","url":"https://b.example"}}}}`,
			want: `"schedules.s.payload.url" is given more than once`},
		{name: "case in a schedule", file: `{"schedules":{"s":{"every":"1m","Kind":"http"}}}`, want: `unknown field "Kind"`},
		{name: "case in a rule", file: `{"classify-rules":[{"contains":"x","Class":"permanent"}]}`, want: `unknown field "Class"`},
		{name: "case in a dependency", file: `{"breaker-dependencies":{"pay":{"Hosts":["pay.example"]}}}`, want: `unknown field "Hosts"`},
		{name: "lone surrogate", file: `{"schedules":{"s":{"every":"1m","kind":"http","payload":{"url":"https://a.example/\ud800"}}}}`, want: "lone UTF-16 surrogate"},
		{name: "duplicate schedule by flag", args: []string{"--schedules", `{"s":{"every":"1m","kind":"http"},"s":{"every":"2m","kind":"http"}}`},
			want: `"s" is given more than once`},
		{name: "case in a schedule by flag", args: []string{"--schedules", `{"s":{"EVERY":"1m","kind":"http"}}`}, want: `unknown field "EVERY"`},
		{name: "duplicate in a dependency by flag", args: []string{"--breaker-dependencies", `{"pay":{"hosts":["a.example"],"hosts":["b.example"]}}`},
			want: `"pay.hosts" is given more than once`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = []string{"--config", writeFile(t, "c.json", tc.file)}
			}
			_, err := loadConfig(t, nil, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
