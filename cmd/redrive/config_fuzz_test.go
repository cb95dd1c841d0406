package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// fuzzLoad runs loadServeConfig with the given command-line settings and
// environment, as `redrive serve` would.
func fuzzLoad(t *testing.T, flags map[string]string, env map[string]string) (*serveConfig, error) {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addServeFlags(fs)
	for k, v := range flags {
		if err := fs.Set(k, v); err != nil {
			t.Fatalf("setting --%s: %v", k, err)
		}
	}
	return loadServeConfig(fs, func(k string) string { return env[k] })
}

// checkValidConfig checks the invariants of a config that loaded without
// error: every value is within the bounds the settings promise.
func checkValidConfig(t *testing.T, c *serveConfig) {
	t.Helper()
	if _, err := listenHostPort(c.Addr); err != nil {
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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		path := filepath.Join(t.TempDir(), "redrive.json")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := fuzzLoad(t, nil, map[string]string{configEnv: path})
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
		// The object form of queues lists exactly the queues it names.
		var obj struct {
			Queues map[string]int `json:"queues"`
		}
		if bytes.Count(content, []byte(`"queues"`)) == 1 && json.Unmarshal(content, &obj) == nil && obj.Queues != nil {
			if len(obj.Queues) != len(c.Queues) {
				t.Fatalf("content %q: queues object %v became %v", content, obj.Queues, c.Queues)
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
