package config

import (
	"strings"
	"testing"
)

// TestConfigFileTypoIsUnknownSetting: a misspelt key is reported as an
// unknown setting, naming the key and the setting it is close to,
// whatever its value's shape (a scalar, an object, an array), at the top
// level and inside the objects of known keys.
func TestConfigFileTypoIsUnknownSetting(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{name: "object", file: `{"queus":{"default":5}}`, want: []string{`unknown setting "queus"`, `did you mean "queues"?`}},
		{name: "array", file: `{"clasify-rules":[{"contains":"x","class":"permanent"}]}`, want: []string{`unknown setting "clasify-rules"`, `did you mean "classify-rules"?`}},
		{name: "scalar", file: `{"wokers":3}`, want: []string{`unknown setting "wokers"`, `did you mean "workers"?`}},
		{name: "null", file: `{"workers":2,"adr":null}`, want: []string{`unknown setting "adr"`, `did you mean "addr"?`}},
		{name: "object far from any", file: `{"zzzzzz":{"a":1}}`, want: []string{`unknown setting "zzzzzz"`}},
		{name: "in retry", file: `{"retry":{"max-retrys":3}}`, want: []string{`unknown retry setting "max-retrys"`, `did you mean "max_retries"?`}},
		{name: "in retry, object", file: `{"retry":{"max-retrys":{"n":3}}}`, want: []string{`unknown retry setting "max-retrys"`, `did you mean "max_retries"?`}},
		{name: "in a queue", file: `{"queues":{"default":{"worker":3}}}`, want: []string{`queue "default": unknown key "worker"`, `did you mean "workers"?`}},
		{name: "in a queue, object", file: `{"queues":{"default":{"retri":{"max-retries":3}}}}`, want: []string{`queue "default": unknown key "retri"`, `did you mean "retry"?`}},
		{name: "in classify, object", file: `{"classify":{"permanent-statuss":[400]}}`, want: []string{`unknown`, `"permanent-statuss"`}},
		{name: "in breaker, object", file: `{"breaker":{"treshold":{"a":1}}}`, want: []string{`unknown`, `"treshold"`}},
		{name: "in a schedule, object", file: `{"schedules":{"s":{"every":"1m","kind":"http","paylod":{"url":"https://a.example"}}}}`, want: []string{`unknown field "paylod"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(t, nil, "--config", writeFile(t, "c.json", tc.file))
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want %q", err, w)
				}
			}
		})
	}
}

// TestDidYouMean: a suggestion only for a close key.
func TestDidYouMean(t *testing.T) {
	known := []string{"addr", "db", "queues", "max_retries"}
	for key, want := range map[string]string{
		"queus": "queues", "QUEUES": "queues", "adr": "addr", "dc": "", "max-retrys": "max_retries", "xyz": "", "queues": "",
	} {
		got := didYouMean(key, known)
		if (want == "") != (got == "") || want != "" && !strings.Contains(got, `"`+want+`"`) {
			t.Errorf("didYouMean(%q) = %q, want %q", key, got, want)
		}
	}
}
