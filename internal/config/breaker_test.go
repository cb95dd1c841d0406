package config

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redrivehq/redrive/breaker"
)

func TestBreakerConfigDefaults(t *testing.T) {
	c, err := fuzzLoad(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Breakers
	want := breaker.Config{Failures: 5, FailureRatio: 0.5, Window: 30 * time.Second, BreakDuration: time.Minute, HalfOpenProbes: 1}
	if b.Default.Failures != want.Failures || b.Default.FailureRatio != want.FailureRatio || b.Default.Window != want.Window ||
		b.Default.BreakDuration != want.BreakDuration || b.Default.HalfOpenProbes != want.HalfOpenProbes ||
		b.Default.CountOnly || b.Default.CountRateLimited || b.Default.MinRequests != 0 {
		t.Fatalf("default breaker = %+v, want %+v", b.Default, want)
	}
	if !b.HTTP || len(b.Dependencies) != 0 {
		t.Fatalf("http %v, dependencies %v; want http on, none", b.HTTP, b.Dependencies)
	}
	// The defaults are the breaker package's.
	d := breaker.DefaultConfig()
	if b.Default.Failures != d.Failures || b.Default.FailureRatio != d.FailureRatio || b.Default.Window != d.Window ||
		b.Default.BreakDuration != d.BreakDuration || b.Default.HalfOpenProbes != d.HalfOpenProbes {
		t.Fatalf("serve's default breaker %+v differs from breaker.DefaultConfig %+v", b.Default, d)
	}
}

func TestBreakerConfigSources(t *testing.T) {
	deps := `{"payments":{"hosts":["api.pay.example","*.pay.example:8443"],"failures":3,"window":"10s","open_for":"20s","probes":2},` +
		`"search":{"ratio":0,"count_rate_limited":true},"ledger":{"hosts":["10.0.0.7","[::1]:9000"],"ratio":0.8,"min_requests":20,"consecutive":"off"}}`
	flags := map[string]string{"breaker-failures": "8", "breaker-ratio": "0.6", "breaker-window": "1m", "breaker-open-for": "2m",
		"breaker-probes": "3", "breaker-count-rate-limited": "false", "breaker-consecutive": "4", "breaker-dependencies": deps}
	env := map[string]string{}
	obj := map[string]any{}
	for k, v := range flags {
		env[(setting{name: k}).env()] = v
		if k == "breaker-dependencies" {
			obj[breakerKey(k)] = json.RawMessage(v)
		} else {
			obj[breakerKey(k)] = v
		}
	}
	content, _ := json.Marshal(map[string]any{"breaker": obj})
	path := writeConfig(t, string(content))
	for src, load := range map[string]func() (*Serve, error){
		"flags": func() (*Serve, error) { return fuzzLoad(t, flags, nil) },
		"env":   func() (*Serve, error) { return fuzzLoad(t, nil, env) },
		"file":  func() (*Serve, error) { return fuzzLoad(t, nil, map[string]string{FileEnv: path}) },
	} {
		c, err := load()
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		b := c.Breakers
		if b.Default.Failures != 8 || b.Default.FailureRatio != 0.6 || b.Default.Consecutive != 4 || b.Default.Window != time.Minute ||
			b.Default.BreakDuration != 2*time.Minute || b.Default.HalfOpenProbes != 3 {
			t.Fatalf("%s: default = %+v", src, b.Default)
		}
		if len(b.Dependencies) != 3 || b.Dependencies[0].Name != "ledger" || b.Dependencies[1].Name != "payments" || b.Dependencies[2].Name != "search" {
			t.Fatalf("%s: dependencies = %+v", src, b.Dependencies)
		}
		pay, _ := b.Dependency("payments")
		// The dependency's fields on top of the defaults.
		if pc := pay.Config; pc.Failures != 3 || pc.FailureRatio != 0.6 || pc.Window != 10*time.Second || pc.BreakDuration != 20*time.Second || pc.HalfOpenProbes != 2 {
			t.Fatalf("%s: payments = %+v", src, pc)
		}
		if sc, _ := b.Dependency("search"); !sc.Config.CountOnly || sc.Config.FailureRatio != 0 || !sc.Config.CountRateLimited || sc.Config.Failures != 8 {
			t.Fatalf("%s: search = %+v", src, sc.Config)
		}
		if lc, _ := b.Dependency("ledger"); lc.Config.FailureRatio != 0.8 || lc.Config.MinRequests != 20 || lc.Config.Consecutive != breaker.NoConsecutive {
			t.Fatalf("%s: ledger = %+v", src, lc.Config)
		}
		for raw, want := range map[string]string{
			"https://api.pay.example/charge":       "payments",
			"https://API.PAY.EXAMPLE./charge":      "payments",
			"http://api.pay.example:8080/":         "payments", // any port
			"https://eu.pay.example:8443/":         "payments",
			"https://eu.pay.example/":              "", // the wildcard is for port 8443 only
			"https://pay.example:8443/":            "", // *.pay.example is subdomains only
			"http://10.0.0.7/x":                    "ledger",
			"http://[::1]:9000/":                   "ledger",
			"http://[::1]:9001/":                   "",
			"https://api.pay.example.evil.test/":   "",
			"https://other.example/":               "",
			"https://deep.eu.pay.example:8443/a/b": "payments",
		} {
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := b.HTTPDependency(u); got != want {
				t.Errorf("%s: %s maps to %q, want %q", src, raw, got, want)
			}
		}
		reg := b.Registry()
		if st := reg.Get("payments").Status(); st.Name != "payments" {
			t.Fatalf("%s: registry lacks payments: %+v", src, st)
		}
	}
}

func TestBreakerConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		flags map[string]string
		file  string
		want  string
	}{
		{flags: map[string]string{"breaker-failures": "0"}, want: "--breaker-failures: 0: want 1 to 1000000"},
		{flags: map[string]string{"breaker-ratio": "1.5"}, want: "--breaker-ratio: 1.5: want above 0 and at most 1"},
		{flags: map[string]string{"breaker-ratio": "half"}, want: `--breaker-ratio: "half": not a number`},
		{flags: map[string]string{"breaker-window": "1ms"}, want: "--breaker-window: 1ms: want from 100ms to 24h0m0s"},
		{flags: map[string]string{"breaker-open-for": "soon"}, want: `--breaker-open-for: "soon": not a duration`},
		{flags: map[string]string{"breaker-probes": "0"}, want: "--breaker-probes: 0: want 1 to 1000"},
		{flags: map[string]string{"breaker-consecutive": "0"}, want: "--breaker-consecutive: 0: want 1 to 1000000 (or failures, or off)"},
		{flags: map[string]string{"breaker-consecutive": "always"}, want: `--breaker-consecutive: "always": not a whole number (or failures, or off)`},
		{flags: map[string]string{"breaker-dependencies": `{"p":{"consecutive":true}}`}, want: `--breaker-dependencies: dependency "p": consecutive: "true": not a whole number`},
		{flags: map[string]string{"breaker-dependencies": `[1]`}, want: "--breaker-dependencies: want a JSON object of dependency names"},
		{flags: map[string]string{"breaker-dependencies": `{"p":{"failures":0}}`}, want: `--breaker-dependencies: dependency "p": failures: 0: want 1 to 1000000`},
		{flags: map[string]string{"breaker-dependencies": `{"p":{"window":"5"}}`}, want: `--breaker-dependencies: dependency "p": window: "5": not a duration`},
		{flags: map[string]string{"breaker-dependencies": `{"p":{"ratio":2}}`}, want: `--breaker-dependencies: dependency "p": ratio: 2: want above 0`},
		{flags: map[string]string{"breaker-dependencies": `{"p":{"probes":5000}}`}, want: `--breaker-dependencies: dependency "p": probes: 5000`},
		{flags: map[string]string{"breaker-dependencies": `{"p":{"colour":"red"}}`}, want: `--breaker-dependencies: dependency "p": want an object`},
		{flags: map[string]string{"breaker-dependencies": `{"p":{"hosts":["https://x.example/"]}}`}, want: `--breaker-dependencies: dependency "p": hosts: "https://x.example/" is not a host name`},
		{flags: map[string]string{"breaker-dependencies": `{"p":{"hosts":["x.example:0"]}}`}, want: `dependency "p": hosts: "x.example:0": port "0"`},
		{flags: map[string]string{"breaker-dependencies": `{"a":{"hosts":["x.example"]},"b":{"hosts":["X.example."]}}`}, want: `dependency "b": hosts: x.example is also mapped to dependency "a"`},
		{flags: map[string]string{"breaker-dependencies": `{" a":{}}`}, want: `dependency " a" starts or ends with white space`},
		{flags: map[string]string{"breaker-dependencies": `{"":{}}`}, want: `dependency is required`},
		{file: `{"breaker":{"failures":"many"}}`, want: `breaker.failures: "many": not a whole number`},
		{file: `{"breaker":{"dependencies":{"p":{"open_for":"1s","probes":-1}}}}`, want: `breaker.dependencies: dependency "p": probes: -1`},
		{file: `{"breaker":{"wobble":1}}`, want: `breaker: unknown breaker setting "wobble"`},
		{file: `{"breaker":{"failures":[1]}}`, want: `breaker: failures: want a string, a number or a boolean`},
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

func TestBreakerRatioOff(t *testing.T) {
	for _, v := range []string{"0", "off", "OFF"} {
		c, err := fuzzLoad(t, map[string]string{"breaker-ratio": v}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Breakers.Default.CountOnly || c.Breakers.Default.FailureRatio != 0 {
			t.Fatalf("--breaker-ratio %s: %+v, want count only", v, c.Breakers.Default)
		}
		if !c.Breakers.Default.Trips(5, 1_000_000) {
			t.Fatalf("--breaker-ratio %s: 5 failures among many calls must trip a count-only breaker", v)
		}
	}
}

// FuzzBreakerSettings gives the same breaker settings as flags,
// environment variables and a config file: the three agree, an error names
// the setting as its source spells it, and an accepted configuration is
// valid, within the settings' bounds, for the default and every dependency.
func FuzzBreakerSettings(f *testing.F) {
	for _, s := range [][4]string{
		{"5", "0.5", "30s", `{"payments":{"hosts":["api.pay.example"],"failures":3}}`},
		{"1", "off", "100ms", ""},
		{"0", "2", "1ms", `{"a":{"hosts":["x"]},"b":{"hosts":["x"]}}`},
		{"1000000", "1", "24h", `{"p":{"hosts":["*.example.com:443","[::1]"],"ratio":0,"window":"1m","open_for":"5s","probes":3,"min_requests":10,"count_rate_limited":true}}`},
		{"-3", "NaN", "-1s", `{"p":{"failures":1.5}}`},
		{"", "", "", `{"p":{"hosts":["http://x/"]}}`},
		{"7", "0.25", "2m", `{"p":null}`},
		{"7", "1e-9", "1h", `{"\u0000":{}}`},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, failures, ratio, window, deps string) {
		vals := map[string]string{"breaker-failures": failures, "breaker-ratio": ratio, "breaker-window": window, "breaker-dependencies": deps}
		flags, env, obj := map[string]string{}, map[string]string{}, map[string]any{}
		withFile := true
		for k, v := range vals {
			if v == "" {
				continue
			}
			flags[k], env[(setting{name: k}).env()], obj[breakerKey(k)] = v, v, v
			withFile = withFile && utf8.ValidString(v)
		}
		content, err := json.Marshal(map[string]any{"breaker": obj})
		if err != nil {
			t.Fatal(err)
		}
		path := writeConfig(t, string(content))
		type result struct {
			c   *Serve
			err error
		}
		results := map[string]result{}
		for _, src := range []string{"flags", "env", "file"} {
			var c *Serve
			var err error
			var prefix string
			switch src {
			case "flags":
				prefix = "--breaker-"
				c, err = fuzzLoad(t, flags, nil)
			case "env":
				prefix = "REDRIVE_BREAKER_"
				c, err = fuzzLoad(t, nil, env)
			case "file":
				if !withFile {
					continue
				}
				prefix = path + ": breaker."
				c, err = fuzzLoad(t, nil, map[string]string{FileEnv: path})
			}
			results[src] = result{c, err}
			if err != nil {
				if !strings.HasPrefix(err.Error(), prefix) {
					t.Fatalf("%s %q: error does not name the breaker setting: %v", src, vals, err)
				}
				continue
			}
			checkValidConfig(t, c)
			checkBreaker(t, src+" default", c.Breakers.Default)
			for _, d := range c.Breakers.Dependencies {
				checkBreaker(t, src+" "+d.Name, d.Config)
				if err := checkDependencyName(d.Name); err != nil {
					t.Fatalf("%s: accepted dependency name %q: %v", src, d.Name, err)
				}
				for _, h := range d.Hosts {
					p, err := parseHostPattern(h)
					if err != nil {
						t.Fatalf("%s: accepted host %q: %v", src, h, err)
					}
					again, err := parseHostPattern(p.String())
					if err != nil || again != p {
						t.Fatalf("%s: host %q = %+v; its text %q reads back as %+v, %v", src, h, p, p.String(), again, err)
					}
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
				t.Fatalf("%q: the flags say %v, %s says %v", vals, fl.err, src, o.err)
			}
			if fl.err == nil && (!sameBreaker(fl.c.Breakers.Default, o.c.Breakers.Default) || len(fl.c.Breakers.Dependencies) != len(o.c.Breakers.Dependencies)) {
				t.Fatalf("%q: the flags give %+v, %s %+v", vals, fl.c.Breakers, src, o.c.Breakers)
			}
		}
	})
}

// sameBreaker compares the settings of two breaker configurations.
func sameBreaker(a, b breaker.Config) bool {
	return a.Failures == b.Failures && a.Window == b.Window && a.FailureRatio == b.FailureRatio && a.CountOnly == b.CountOnly &&
		a.MinRequests == b.MinRequests && a.BreakDuration == b.BreakDuration && a.HalfOpenProbes == b.HalfOpenProbes &&
		a.CountRateLimited == b.CountRateLimited
}

// checkBreaker checks that an accepted breaker configuration is valid and
// within the bounds of the breaker settings.
func checkBreaker(t *testing.T, what string, c breaker.Config) {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatalf("%s: accepted an invalid breaker %+v: %v", what, c, err)
	}
	if c.Failures < 1 || c.Failures > maxBreakerFailures || c.HalfOpenProbes < 1 || c.HalfOpenProbes > maxBreakerProbes ||
		c.Window < minBreakerDuration || c.Window > maxBreakerDuration || c.BreakDuration < minBreakerDuration ||
		c.BreakDuration > maxBreakerDuration || c.MinRequests < 0 || (c.CountOnly && c.FailureRatio != 0) ||
		(!c.CountOnly && !(c.FailureRatio > 0 && c.FailureRatio <= 1)) {
		t.Fatalf("%s: accepted a breaker out of bounds: %+v", what, c)
	}
}

// FuzzHostPattern: an accepted host pattern reads back from its text, and
// a URL to the exact host it names maps to its dependency.
func FuzzHostPattern(f *testing.F) {
	for _, s := range []string{"api.example.com", "API.Example.COM.", "*.example.com:8443", "10.0.0.1", "[::1]:80", "::ffff:10.0.0.1",
		"*.", "*", "a..b", "x:99999", "https://x/", "[fe80::1%eth0]", " host ", "-a.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseHostPattern(s)
		if err != nil {
			return
		}
		again, err := parseHostPattern(p.String())
		if err != nil || again != p {
			t.Fatalf("%q = %+v; its text %q reads back as %+v, %v", s, p, p.String(), again, err)
		}
		var m hostMap
		if err := m.add(p, "dep"); err != nil {
			t.Fatal(err)
		}
		if err := m.add(p, "other"); err == nil {
			t.Fatalf("%q mapped twice", s)
		}
		if p.wildcard {
			return
		}
		host := p.host
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		if p.port != "" {
			host += ":" + p.port
		}
		u, err := url.Parse("http://" + host + "/")
		if err != nil {
			return // a host url.Parse refuses: no URL reaches it
		}
		if got := m.lookup(u); got != "dep" {
			t.Fatalf("%q: %s maps to %q, want dep", s, u, got)
		}
	})
}
