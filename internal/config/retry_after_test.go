package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redrivehq/redrive/retry"
)

func TestRetryAfterJitterSettings(t *testing.T) {
	for _, tc := range []struct {
		jitter, factor string
		want           time.Duration // RetryAfterSpread of a 2s Retry-After
	}{
		{"", "", 200 * time.Millisecond},
		{"1s", "0.1", 200 * time.Millisecond},
		{"50ms", "", 50 * time.Millisecond},
		{"5s", "1", 2 * time.Second},
		{"0", "", 0},
		{"off", "0.5", 0},
		{"OFF", "", 0},
	} {
		flags := map[string]string{}
		if tc.jitter != "" {
			flags["retry-after-jitter"] = tc.jitter
		}
		if tc.factor != "" {
			flags["retry-after-jitter-factor"] = tc.factor
		}
		c, err := fuzzLoad(t, flags, nil)
		if err != nil {
			t.Fatalf("%v: %v", flags, err)
		}
		if got := c.Retry.RetryAfterSpread(2 * time.Second); got != tc.want {
			t.Errorf("%v: spread of 2s = %v, want %v", flags, got, tc.want)
		}
	}
	// The defaults leave the policy as retry.DefaultPolicy() has it.
	c, err := fuzzLoad(t, map[string]string{"retry-after-jitter": "1s", "retry-after-jitter-factor": "0.1"}, nil)
	if err != nil || c.Retry != retry.DefaultPolicy() {
		t.Fatalf("explicit defaults: %+v, %v; want retry.DefaultPolicy()", c.Retry, err)
	}
	// A queue's own.
	path := writeConfig(t, `{"queues":{"q":{"retry":{"after_jitter":"off"}}}}`)
	c, err = fuzzLoad(t, nil, map[string]string{FileEnv: path})
	if err != nil || c.QueueRetry["q"].RetryAfterJitter >= 0 {
		t.Fatalf("queue q: %+v, %v; want the jitter off", c.QueueRetry["q"], err)
	}
	for flag, v := range map[string]string{"retry-after-jitter": "-1s", "retry-after-jitter-factor": "0"} {
		_, err := fuzzLoad(t, map[string]string{flag: v}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "--"+flag+": ") {
			t.Errorf("--%s %s: %v, want an error naming it", flag, v, err)
		}
	}
}

// FuzzRetryAfterJitterSettings gives the Retry-After jitter settings as
// flags and in a config file's "retry" object: both agree, an error names
// the setting, and an accepted policy is valid with a spread never above
// the Retry-After.
func FuzzRetryAfterJitterSettings(f *testing.F) {
	for _, s := range [][2]string{{"1s", "0.1"}, {"off", ""}, {"0", "1"}, {"-1s", "0"}, {"169h", "1.5"}, {"1", "NaN"}, {"", "0.0001"}, {" 2s ", " 0.5 "}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, jitter, factor string) {
		flags, obj := map[string]string{}, map[string]string{}
		if jitter != "" {
			flags["retry-after-jitter"], obj["after_jitter"] = jitter, jitter
		}
		if factor != "" {
			flags["retry-after-jitter-factor"], obj["after_jitter_factor"] = factor, factor
		}
		fc, ferr := fuzzLoad(t, flags, nil)
		if ferr != nil && !strings.HasPrefix(ferr.Error(), "--retry-after-jitter") {
			t.Fatalf("%q %q: error does not name the setting: %v", jitter, factor, ferr)
		}
		if ferr == nil {
			checkValidConfig(t, fc)
			p := fc.Retry
			if p.RetryAfterJitter > maxRetryDelaySetting || p.RetryAfterJitterFactor < 0 || p.RetryAfterJitterFactor > 1 {
				t.Fatalf("%q %q: accepted %+v", jitter, factor, p)
			}
			for _, ra := range []time.Duration{time.Millisecond, 2 * time.Second, time.Hour} {
				if w := p.RetryAfterSpread(ra); w < 0 || w > ra {
					t.Fatalf("%q %q: spread of %v is %v", jitter, factor, ra, w)
				}
			}
		}
		if !utf8.ValidString(jitter) || !utf8.ValidString(factor) {
			return
		}
		content, _ := json.Marshal(map[string]any{"retry": obj})
		path := writeConfig(t, string(content))
		c, err := fuzzLoad(t, nil, map[string]string{FileEnv: path})
		if (err == nil) != (ferr == nil) {
			t.Fatalf("%q %q: the flags say %v, the file %v", jitter, factor, ferr, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), path+": retry.after_jitter") {
			t.Fatalf("%q %q: error does not name the setting: %v", jitter, factor, err)
		}
		if err == nil && c.Retry != fc.Retry {
			t.Fatalf("%q %q: the flags give %+v, the file %+v", jitter, factor, fc.Retry, c.Retry)
		}
	})
}
