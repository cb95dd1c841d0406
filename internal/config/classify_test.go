package config

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redrivehq/redrive/failure"
)

// writeConfig writes content as a config file and returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "redrive.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestClassifyConfigSources(t *testing.T) {
	status := "404=transient, 409=permanent"
	rules := `[{"contains":"quota exceeded","class":"rate_limited"},{"regexp":"^E[0-9]+:","class":"permanent"}]`
	fromFlags, err := fuzzLoad(t, map[string]string{"classify-status": status, "classify-rules": rules, "classify-common-rules": "true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fromEnv, err := fuzzLoad(t, nil, map[string]string{"REDRIVE_CLASSIFY_STATUS": status, "REDRIVE_CLASSIFY_RULES": rules, "REDRIVE_CLASSIFY_COMMON_RULES": "true"})
	if err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, `{"classify":{"status":{"404":"transient","409":"permanent"},"rules":`+rules+`,"common_rules":true}}`)
	fromFile, err := fuzzLoad(t, nil, map[string]string{FileEnv: path})
	if err != nil {
		t.Fatal(err)
	}
	for src, c := range map[string]*Serve{"flags": fromFlags, "env": fromEnv, "file": fromFile} {
		cc := c.Classify
		if len(cc.Status) != 2 || cc.Status[404] != failure.Transient || cc.Status[409] != failure.Permanent {
			t.Errorf("%s: status = %v", src, cc.Status)
		}
		if len(cc.Rules) != 2 || cc.Rules[0].Contains != "quota exceeded" || cc.Rules[1].Class != failure.Permanent || !cc.Common {
			t.Errorf("%s: rules = %+v, common %v", src, cc.Rules, cc.Common)
		}
		cl := cc.Classifier
		for _, tc := range []struct {
			err  error
			want failure.Class
		}{
			{&failure.StatusError{Code: 404}, failure.Transient},
			{&failure.StatusError{Code: 409}, failure.Permanent},
			{&failure.StatusError{Code: 410}, failure.Permanent},
			{errors.New("billing: quota exceeded for today"), failure.RateLimited},
			{errors.New("E42: bad input"), failure.Permanent},
			{errors.New("upstream timeout"), failure.Transient}, // a common rule
			{errors.New("something else"), failure.Unknown},
		} {
			if got := cl.Classify(tc.err).Class; got != tc.want {
				t.Errorf("%s: Classify(%v) = %v, want %v", src, tc.err, got, tc.want)
			}
		}
	}
	// The string form of status in the file works too.
	path = writeConfig(t, `{"classify":{"status":"404=transient"}}`)
	c, err := fuzzLoad(t, nil, map[string]string{FileEnv: path})
	if err != nil || c.Classify.Status[404] != failure.Transient {
		t.Fatalf("string status in the file: %v, %v", err, c)
	}
	// Nothing configured: the built-in classification.
	c, err = fuzzLoad(t, nil, nil)
	if err != nil || c.Classify.Classifier != nil || c.Classify.QueueClassifiers != nil {
		t.Fatalf("defaults: %v, %+v", err, c.Classify)
	}
}

func TestClassifyPerQueue(t *testing.T) {
	path := writeConfig(t, `{
		"classify": {"status": {"404": "transient", "500": "permanent"}, "rules": [{"contains": "nope", "class": "permanent"}]},
		"queues": {
			"default": 5,
			"webhooks": {"workers": 2, "classify": {"status": {"404": "permanent", "409": "transient"}, "rules": [{"contains": "nope", "class": "transient"}]}},
			"other": {"classify": {"common_rules": true}}
		}
	}`)
	c, err := fuzzLoad(t, nil, map[string]string{FileEnv: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, own := c.Classify.Queues["default"]; own {
		t.Fatal("queue default has no classify object but got its own classification")
	}
	wh, ok := c.Classify.Queues["webhooks"]
	if !ok {
		t.Fatal("queue webhooks lost its classification")
	}
	// On top of the default: the queue's codes win, the default's others stay.
	want := map[int]failure.Class{404: failure.Permanent, 409: failure.Transient, 500: failure.Permanent}
	if !maps.Equal(wh.Status, want) {
		t.Fatalf("webhooks status = %v, want %v", wh.Status, want)
	}
	cl := c.Classify.QueueClassifiers["webhooks"]
	if got := cl.Classify(errors.New("nope")).Class; got != failure.Transient {
		t.Fatalf("webhooks: the queue's rule must come first: got %v", got)
	}
	if got := c.Classify.Classifier.Classify(errors.New("nope")).Class; got != failure.Permanent {
		t.Fatalf("default: got %v", got)
	}
	if got := c.Classify.QueueClassifiers["other"].Classify(errors.New("connection refused by peer")).Class; got != failure.Transient {
		t.Fatalf("other: common rules not applied: %v", got)
	}
	if got := c.Classify.QueueClassifiers["other"].Classify(&failure.StatusError{Code: 404}).Class; got != failure.Transient {
		t.Fatalf("other: the default's status overrides not inherited: %v", got)
	}
}

func TestClassifyConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		flags map[string]string
		file  string
		want  string
	}{
		{flags: map[string]string{"classify-status": "404"}, want: `--classify-status: "404": want status=class`},
		{flags: map[string]string{"classify-status": "700=transient"}, want: `--classify-status: "700=transient": "700" is not an HTTP status code`},
		{flags: map[string]string{"classify-status": "404=sometimes"}, want: `--classify-status: "404=sometimes": unknown class "sometimes"`},
		{flags: map[string]string{"classify-status": "404=transient,404=permanent"}, want: "--classify-status: status 404 is given twice"},
		{flags: map[string]string{"classify-rules": `{"contains":"x"}`}, want: "--classify-rules: want a JSON array of rules"},
		{flags: map[string]string{"classify-rules": `[{"contains":"x","class":"transient"},{"regexp":"(","class":"permanent"}]`}, want: "--classify-rules: rule 2: invalid regexp"},
		{flags: map[string]string{"classify-rules": `[{"contains":"x","regexp":"y","class":"transient"}]`}, want: `--classify-rules: rule 1: both "contains" and "regexp"`},
		{flags: map[string]string{"classify-rules": `[{"class":"transient"}]`}, want: `--classify-rules: rule 1: want one of "contains" and "regexp"`},
		{flags: map[string]string{"classify-rules": `[{"contains":"x","class":"none"}]`}, want: `--classify-rules: rule 1: class "none"`},
		{flags: map[string]string{"classify-rules": `[{"contains":"x","class":"transient","colour":"red"}]`}, want: `--classify-rules: rule 1: want an object`},
		{file: `{"classify":{"status":{"404":"maybe"}}}`, want: `classify.status: "404=maybe": unknown class "maybe"`},
		{file: `{"classify":{"colour":"red"}}`, want: `classify: unknown classification setting "colour"`},
		{file: `{"classify":[1]}`, want: "classify: want an object of classification settings"},
		{file: `{"queues":{"q":{"classify":{"rules":[{"contains":"x"}]}}}}`, want: `queues: queue "q": classify.rules: rule 1: class ""`},
		{file: `{"queues":{"q":{"classify":{"status":"1000=transient"}}}}`, want: `queues: queue "q": classify.status: "1000=transient"`},
		{file: `{"queues":{"q":{"classify":{"frobs":1}}}}`, want: `queues: queue "q": classify: unknown classification setting "frobs"`},
	} {
		env := map[string]string{}
		if tc.file != "" {
			env[FileEnv] = writeConfig(t, tc.file)
		}
		_, err := fuzzLoad(t, tc.flags, env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %s: error %v, want it to contain %q", tc.flags, tc.file, err, tc.want)
		}
	}
}

// FuzzClassifySettings gives the same classification settings as flags,
// environment variables and a config file: the three agree on the verdict
// and on the result, an error names the setting as its source spells it,
// and an accepted classification compiles and survives a round trip
// through its textual form.
func FuzzClassifySettings(f *testing.F) {
	for _, s := range [][2]string{
		{"404=transient,409=permanent", `[{"contains":"quota","class":"rate_limited"}]`},
		{"", ""},
		{" 500 = unknown ,, 429=transient", `[{"regexp":"(?i)^e[0-9]+","class":"needs_auth"}]`},
		{"99=transient", "[]"},
		{"404=", `[{"regexp":"(","class":"permanent"}]`},
		{"=permanent", `[{"contains":"","class":"permanent"}]`},
		{"404=transient,404=transient", `[1]`},
		{"abc", `{"contains":"x","class":"transient"}`},
		{"600=permanent", `[{"contains":"x","class":"RateLimited"}]`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, status, rules string) {
		flags, env := map[string]string{}, map[string]string{}
		obj := map[string]any{}
		if status != "" {
			flags["classify-status"], env["REDRIVE_CLASSIFY_STATUS"], obj["status"] = status, status, status
		}
		if rules != "" {
			flags["classify-rules"], env["REDRIVE_CLASSIFY_RULES"], obj["rules"] = rules, rules, rules
		}
		content, err := json.Marshal(map[string]any{"classify": obj})
		if err != nil {
			t.Fatal(err)
		}
		path := writeConfig(t, string(content))
		withFile := utf8.ValidString(status) && utf8.ValidString(rules)
		type result struct {
			c   *Serve
			err error
		}
		results := map[string]result{}
		for src, prefixes := range map[string][]string{
			"flags": {"--classify-status: ", "--classify-rules: "},
			"env":   {"REDRIVE_CLASSIFY_STATUS: ", "REDRIVE_CLASSIFY_RULES: "},
			"file":  {path + ": classify.status: ", path + ": classify.rules: "},
		} {
			var c *Serve
			var err error
			switch src {
			case "flags":
				c, err = fuzzLoad(t, flags, nil)
			case "env":
				c, err = fuzzLoad(t, nil, env)
			case "file":
				if !withFile {
					continue
				}
				c, err = fuzzLoad(t, nil, map[string]string{FileEnv: path})
			}
			results[src] = result{c, err}
			if err != nil {
				if !strings.HasPrefix(err.Error(), prefixes[0]) && !strings.HasPrefix(err.Error(), prefixes[1]) {
					t.Fatalf("%s %q %q: error does not name the setting: %v", src, status, rules, err)
				}
				continue
			}
			checkValidConfig(t, c)
			cc := c.Classify
			for code, class := range cc.Status {
				if code < 100 || code > 599 || class == failure.None || class > failure.NeedsAuth {
					t.Fatalf("%s: accepted status override %d=%v", src, code, class)
				}
			}
			if len(cc.Rules) > maxClassifyRules {
				t.Fatalf("%s: accepted %d rules", src, len(cc.Rules))
			}
			if (len(cc.Status) > 0 || len(cc.Rules) > 0) != (cc.Classifier != nil) {
				t.Fatalf("%s: classifier %v for %+v", src, cc.Classifier, cc)
			}
			// The textual forms read back to the same classification.
			back, err := parseStatusOverrides(formatStatusOverrides(cc.Status))
			if err != nil || !maps.Equal(back, cc.Status) {
				t.Fatalf("%s: status %v round trip: %v, %v", src, cc.Status, back, err)
			}
			rb, err := parseMessageRules(formatRules(cc.Rules))
			if err != nil || len(rb) != len(cc.Rules) {
				t.Fatalf("%s: rules %+v round trip: %+v, %v", src, cc.Rules, rb, err)
			}
			for i := range rb {
				if rb[i] != cc.Rules[i] {
					t.Fatalf("%s: rule %d round trip: %+v became %+v", src, i+1, cc.Rules[i], rb[i])
				}
			}
		}
		fl := results["flags"]
		for _, src := range []string{"env", "file"} {
			o, ok := results[src]
			if !ok {
				continue
			}
			if (fl.err == nil) != (o.err == nil) {
				t.Fatalf("%q %q: the flags say %v, %s says %v", status, rules, fl.err, src, o.err)
			}
			if fl.err == nil && (!maps.Equal(fl.c.Classify.Status, o.c.Classify.Status) || len(fl.c.Classify.Rules) != len(o.c.Classify.Rules)) {
				t.Fatalf("%q %q: the flags give %+v, %s %+v", status, rules, fl.c.Classify, src, o.c.Classify)
			}
		}
	})
}
