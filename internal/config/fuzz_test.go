package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/redrivehq/redrive/retry"
)

// fuzzLoad runs Load with the given command-line settings and
// environment, as `redrive serve` would.
func fuzzLoad(t *testing.T, flags map[string]string, env map[string]string) (*Serve, error) {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	AddFlags(fs)
	for k, v := range flags {
		if err := fs.Set(k, v); err != nil {
			t.Fatalf("setting --%s: %v", k, err)
		}
	}
	return Load(fs, func(k string) string { return env[k] })
}

// checkValidConfig checks the invariants of a config that loaded without
// error: every value is within the bounds the settings promise.
func checkValidConfig(t *testing.T, c *Serve) {
	t.Helper()
	if _, err := ListenHostPort(c.Addr); err != nil {
		t.Fatalf("accepted addr %q: %v", c.Addr, err)
	}
	if strings.TrimSpace(c.DB) == "" {
		t.Fatalf("accepted empty db %q", c.DB)
	}
	if !schemaRE.MatchString(c.Schema) {
		t.Fatalf("accepted schema %q", c.Schema)
	}
	if c.Workers < 1 || c.Workers > maxConcurrency {
		t.Fatalf("accepted workers %d", c.Workers)
	}
	if c.ShutdownTimeout <= 0 || c.ShutdownTimeout > maxShutdownTimeout {
		t.Fatalf("accepted shutdown timeout %s", c.ShutdownTimeout)
	}
	if strings.ContainsAny(c.Token, " \t\r\n") || len(c.Token) > 4096 {
		t.Fatalf("accepted token %q", c.Token)
	}
	checkQueues(t, c.queuesSpec, c.Queues)
	checkPolicy(t, "the default policy", c.Retry)
	for q, p := range c.QueueRetry {
		if _, ok := c.Queues[q]; !ok {
			t.Fatalf("a policy for queue %q, which is not served (%v)", q, c.Queues)
		}
		checkPolicy(t, "queue "+q, p)
	}
}

// checkPolicy checks that an accepted retry policy is within the bounds
// the retry settings promise.
func checkPolicy(t *testing.T, what string, p retry.Policy) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("%s: accepted an invalid policy %+v: %v", what, p, err)
	}
	if p.MaxRetries < 0 || p.MaxRetries > maxRetriesSetting || p.Initial <= 0 || p.MaxDelay < p.Initial ||
		p.MaxDelay > maxRetryDelaySetting || p.Multiplier < 1 || p.Multiplier > maxMultiplierSetting ||
		p.MaxRetryAfter <= 0 || p.MaxRetryAfter > maxRetryDelaySetting || p.JitterMax < 0 || p.JitterMax > maxRetryDelaySetting {
		t.Fatalf("%s: accepted a policy out of bounds: %+v", what, p)
	}
	if _, err := retry.ParseJitter(p.Jitter.String()); err != nil {
		t.Fatalf("%s: accepted jitter %v", what, p.Jitter)
	}
}

// checkQueues checks a parsed queue map: at least one queue, every name
// non-empty, trimmed, free of the separators and within the length bound,
// every concurrency within bounds, and the map survives a round trip
// through its textual form.
func checkQueues(t *testing.T, spec string, qs map[string]int) {
	t.Helper()
	if len(qs) == 0 {
		t.Fatalf("spec %q: accepted with no queue", spec)
	}
	parts := make([]string, 0, len(qs))
	for name, n := range qs {
		if name == "" || strings.TrimSpace(name) != name || strings.ContainsAny(name, ",=") || len(name) > maxQueueName {
			t.Fatalf("spec %q: accepted queue name %q", spec, name)
		}
		if n < 1 || n > maxConcurrency {
			t.Fatalf("spec %q: accepted concurrency %d for %q", spec, n, name)
		}
		parts = append(parts, name+"="+strconv.Itoa(n))
	}
	again, err := parseQueues(strings.Join(parts, ","), 1)
	if err != nil {
		t.Fatalf("spec %q: round trip of %v: %v", spec, qs, err)
	}
	if len(again) != len(qs) {
		t.Fatalf("spec %q: round trip %v became %v", spec, qs, again)
	}
	for name, n := range qs {
		if again[name] != n {
			t.Fatalf("spec %q: round trip %v became %v", spec, qs, again)
		}
	}
}

// fileKeyNamed reports whether msg is an error about one key of the
// config file at path: "<path>: <key>: ..." or "<path>: unknown setting
// "<key>" ...".
func fileKeyNamed(msg, path, key string) bool {
	return strings.HasPrefix(msg, path+": "+key+": ") ||
		strings.HasPrefix(msg, path+": unknown setting "+strconv.Quote(key))
}

func FuzzConfigFile(f *testing.F) {
	// The seeds of testdata/fuzz/FuzzConfigFile come on top of these.
	for _, s := range []string{
		`{}`,
		`{"addr":"127.0.0.1:9090","workers":20,"queues":"default=10,webhooks=50"}`,
		`{"queues":{"default":10,"webhooks":50},"http.allow.private":false}`,
		`{"shutdown-timeout":"2m","log-level":"debug","schema":"jobs","db":"x.db"}`,
		`{"workers":0}`,
		`{"workers":"ten"}`,
		`{"queues":{"a":1.5}}`,
		`{"colour":"red"}`,
		`{"addr":["a"]}`,
		`[1,2]`,
		`{"addr":`,
		``,
		`{"retry":{"max_retries":5,"base":"1s","max":"5m","jitter":"full"}}`,
		`{"retry":{"base":"10s","max":"5s"}}`,
		`{"queues":{"default":10,"webhooks":{"workers":50,"retry":{"max_retries":1,"base":"50ms","max":"200ms"}}}}`,
		`{"queues":{"a":{"retry":{"jitter":"sideways"}}}}`,
		`{"retry-base":"2s","retry":{"base":"3s"}}`,
		`{"allowed-host":"redrive.example,10.0.0.1","trusted-proxy":"10.0.0.0/8"}`,
		`{"allowed-host":"a:1"}`,
		`{"trusted-proxy":"::1/129"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		path := filepath.Join(t.TempDir(), "redrive.json")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := fuzzLoad(t, nil, map[string]string{FileEnv: path})
		if err != nil {
			msg := err.Error()
			// Every error about the file's content names the file.
			if !strings.HasPrefix(msg, path+": ") {
				t.Fatalf("content %q: error does not name the file: %v", content, err)
			}
			// A well-formed object of strings can only be refused for one
			// of its keys, which the error names.
			var vals map[string]string
			if json.Unmarshal(content, &vals) == nil && vals != nil {
				named := false
				for k := range vals {
					if fileKeyNamed(msg, path, k) {
						named = true
						break
					}
				}
				if !named {
					t.Fatalf("content %q: error names none of the keys: %v", content, err)
				}
			}
			return
		}
		checkValidConfig(t, c)
		// The object form of queues lists exactly the queues it names,
		// and a queue's retry object gives that queue its policy.
		var obj struct {
			Queues map[string]json.RawMessage `json:"queues"`
			Retry  *struct {
				MaxRetries *int `json:"max_retries"`
			} `json:"retry"`
		}
		if bytes.Count(content, []byte(`"queues"`)) == 1 && json.Unmarshal(content, &obj) == nil && obj.Queues != nil {
			if len(obj.Queues) != len(c.Queues) {
				t.Fatalf("content %q: queues object %v became %v", content, obj.Queues, c.Queues)
			}
			for name, raw := range obj.Queues {
				name = strings.TrimSpace(name) // as the queue is served
				var q struct {
					Retry *struct {
						MaxRetries *int `json:"max_retries"`
					} `json:"retry"`
				}
				if json.Unmarshal(raw, &q) != nil || q.Retry == nil {
					if _, ok := c.QueueRetry[name]; ok && bytes.Count(content, []byte(`"retry"`)) <= 1 {
						t.Fatalf("content %q: queue %q has no retry object but a policy %+v", content, name, c.QueueRetry[name])
					}
					continue
				}
				p, ok := c.QueueRetry[name]
				if !ok {
					t.Fatalf("content %q: queue %q has a retry object but no policy", content, name)
				}
				if q.Retry.MaxRetries != nil && p.MaxRetries != *q.Retry.MaxRetries {
					t.Fatalf("content %q: queue %q: max_retries %d became %d", content, name, *q.Retry.MaxRetries, p.MaxRetries)
				}
			}
		}
		if bytes.Count(content, []byte(`"max_retries"`)) == 1 && json.Unmarshal(content, &obj) == nil &&
			obj.Retry != nil && obj.Retry.MaxRetries != nil && c.Retry.MaxRetries != *obj.Retry.MaxRetries {
			t.Fatalf("content %q: retry.max_retries %d became %d", content, *obj.Retry.MaxRetries, c.Retry.MaxRetries)
		}
	})
}

// retryFlags are the retry settings FuzzRetrySettings sets, in the order
// of its arguments.
var retryFlags = []string{"retry-max-retries", "retry-base", "retry-max", "retry-jitter", "retry-multiplier"}

func FuzzRetrySettings(f *testing.F) {
	// The seeds of testdata/fuzz/FuzzRetrySettings come on top of these.
	for _, s := range [][5]string{
		{"3", "1s", "30s", "proportional", "2"},
		{"0", "50ms", "200ms", "none", "1"},
		{"1000", "1ns", "168h", "decorrelated", "100"},
		{"5", "10s", "5s", "full", "2"},
		{"-1", "0s", "1h", "equal", "0.5"},
		{"1001", "1s", "169h", "wobbly", "NaN"},
		{"3.0", "1", "1m", " Full ", "+Inf"},
		{"", "", "", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, maxRetries, base, maxDelay, jitter, multiplier string) {
		vals := []string{maxRetries, base, maxDelay, jitter, multiplier}
		flags := map[string]string{}
		env := map[string]string{}
		obj := map[string]string{}
		for i, name := range retryFlags {
			if vals[i] == "" {
				continue // an empty variable counts as unset; leave the setting out everywhere
			}
			flags[name] = vals[i]
			env[(setting{name: name}).env()] = vals[i]
			obj[retryKey(name)] = vals[i]
		}
		// JSON replaces invalid UTF-8, which would change the values: the
		// file is compared only for values it can hold.
		withFile := true
		for _, v := range vals {
			withFile = withFile && utf8.ValidString(v)
		}
		fileContent, err := json.Marshal(map[string]any{"retry": obj})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "redrive.json")
		if err := os.WriteFile(path, fileContent, 0o600); err != nil {
			t.Fatal(err)
		}
		type result struct {
			c   *Serve
			err error
		}
		results := map[string]result{}
		for src, prefix := range map[string]string{"flags": "--retry-", "env": "REDRIVE_RETRY_", "file": path + ": retry"} {
			if src == "file" && !withFile {
				continue
			}
			var c *Serve
			var err error
			switch src {
			case "flags":
				c, err = fuzzLoad(t, flags, nil)
			case "env":
				c, err = fuzzLoad(t, nil, env)
			case "file":
				c, err = fuzzLoad(t, nil, map[string]string{FileEnv: path})
			}
			results[src] = result{c, err}
			if err != nil {
				// The error names a retry setting as its source spells it.
				if !strings.HasPrefix(err.Error(), prefix) {
					t.Fatalf("%s %q: error does not name the retry setting: %v", src, vals, err)
				}
				continue
			}
			checkValidConfig(t, c)
			// Each value given is the one in force.
			p := c.Retry
			if n, err := strconv.Atoi(strings.TrimSpace(maxRetries)); maxRetries != "" && (err != nil || n != p.MaxRetries) {
				t.Fatalf("%s: max retries %q became %d", src, maxRetries, p.MaxRetries)
			}
			if d, err := time.ParseDuration(strings.TrimSpace(base)); base != "" && (err != nil || d != p.Initial) {
				t.Fatalf("%s: base %q became %s", src, base, p.Initial)
			}
			if d, err := time.ParseDuration(strings.TrimSpace(maxDelay)); maxDelay != "" && (err != nil || d != p.MaxDelay) {
				t.Fatalf("%s: max %q became %s", src, maxDelay, p.MaxDelay)
			}
			if j, err := retry.ParseJitter(jitter); jitter != "" && (err != nil || j != p.Jitter) {
				t.Fatalf("%s: jitter %q became %s", src, jitter, p.Jitter)
			}
		}
		// The three sources agree on the verdict and on the policy.
		fl := results["flags"]
		for _, src := range []string{"env", "file"} {
			o, ok := results[src]
			if !ok {
				continue
			}
			if (fl.err == nil) != (o.err == nil) {
				t.Fatalf("%q: the flags say %v, %s says %v", vals, fl.err, src, o.err)
			}
			if fl.err == nil && fl.c.Retry != o.c.Retry {
				t.Fatalf("%q: the flags give %+v, %s %+v", vals, fl.c.Retry, src, o.c.Retry)
			}
		}
	})
}

func FuzzQueues(f *testing.F) {
	// The seeds of testdata/fuzz/FuzzQueues come on top of these.
	for _, s := range []string{
		"default",
		"default=10,webhooks=50",
		" a = 1 , b ,, ",
		"a=0",
		"a=10001",
		"a=x",
		"=5",
		"a,a",
		",",
		"",
		strings.Repeat("q", maxQueueName+1),
	} {
		f.Add(s, 10)
	}
	f.Fuzz(func(t *testing.T, spec string, def int) {
		if def < 1 || def > maxConcurrency {
			def = 1 + (def%maxConcurrency+maxConcurrency)%maxConcurrency
		}
		qs, err := parseQueues(spec, def)
		if err == nil {
			checkQueues(t, spec, qs)
		} else if !strings.Contains(err.Error(), "queue") {
			t.Fatalf("spec %q: error does not say it is about a queue: %v", spec, err)
		}

		// The same spec through the flag and the environment: the same
		// verdict, and an error names the setting as its source spells it.
		for _, src := range []struct {
			flags, env map[string]string
			prefix     string
		}{
			{flags: map[string]string{"queues": spec}, prefix: "--queues: "},
			{env: map[string]string{"REDRIVE_QUEUES": spec}, prefix: "REDRIVE_QUEUES: "},
		} {
			if src.env != nil && spec == "" {
				continue // an empty variable counts as unset
			}
			c, lerr := fuzzLoad(t, src.flags, src.env)
			if (lerr == nil) != (err == nil) {
				t.Fatalf("spec %q: parseQueues says %v, %s says %v", spec, err, strings.TrimSuffix(src.prefix, ": "), lerr)
			}
			if lerr != nil {
				if !strings.HasPrefix(lerr.Error(), src.prefix) {
					t.Fatalf("spec %q: error does not name %s: %v", spec, strings.TrimSuffix(src.prefix, ": "), lerr)
				}
				continue
			}
			checkValidConfig(t, c)
		}
	})
}

// readCorpus reads the arguments of a seed file of testdata/fuzz: one
// []byte("...") or string("...") per line after the header.
func readCorpus(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a fuzz corpus file", path)
	}
	var args []string
	for _, l := range lines[1:] {
		open := strings.IndexByte(l, '(')
		if open < 0 || !strings.HasSuffix(l, ")") {
			t.Fatalf("%s: cannot read %q", path, l)
		}
		s, err := strconv.Unquote(l[open+1 : len(l)-1])
		if err != nil {
			t.Fatalf("%s: %q: %v", path, l, err)
		}
		args = append(args, s)
	}
	return args
}

// TestConfigCorpusVerdicts checks that the committed seeds named valid_*
// load and those named invalid_* are refused, so that the corpus keeps
// meaning what its names say.
func TestConfigCorpusVerdicts(t *testing.T) {
	for _, fuzz := range []string{"FuzzConfigFile", "FuzzRetrySettings"} {
		paths, err := filepath.Glob(filepath.Join("testdata", "fuzz", fuzz, "*"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no seeds for %s: %v", fuzz, err)
		}
		for _, p := range paths {
			name := filepath.Base(p)
			valid := strings.HasPrefix(name, "valid_")
			if !valid && !strings.HasPrefix(name, "invalid_") {
				continue
			}
			args := readCorpus(t, p)
			var err error
			switch fuzz {
			case "FuzzConfigFile":
				file := filepath.Join(t.TempDir(), "redrive.json")
				if werr := os.WriteFile(file, []byte(args[0]), 0o600); werr != nil {
					t.Fatal(werr)
				}
				_, err = fuzzLoad(t, nil, map[string]string{FileEnv: file})
			case "FuzzRetrySettings":
				flags := map[string]string{}
				for i, v := range args {
					flags[retryFlags[i]] = v
				}
				_, err = fuzzLoad(t, flags, nil)
			}
			if valid && err != nil {
				t.Errorf("%s/%s: refused: %v", fuzz, name, err)
			}
			if !valid && err == nil {
				t.Errorf("%s/%s: accepted", fuzz, name)
			}
		}
	}
}
