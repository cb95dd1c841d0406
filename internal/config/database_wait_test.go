package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The settings of --database-wait (serve's waiting for PostgreSQL is
// tested in cmd/redrive).

func TestDatabaseWaitSetting(t *testing.T) {
	c, err := loadConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseWait != 15*time.Minute {
		t.Fatalf("default database wait %s, want 15m", c.DatabaseWait)
	}
	file := writeFile(t, "wait.json", `{"database-wait": "2m"}`)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want time.Duration
	}{
		{env: map[string]string{FileEnv: file}, want: 2 * time.Minute},
		{env: map[string]string{FileEnv: writeFile(t, "wait2.json", `{"database_wait": "0"}`)}, want: 0},
		{env: map[string]string{FileEnv: file, "REDRIVE_DATABASE_WAIT": "90s"}, want: 90 * time.Second},
		{env: map[string]string{FileEnv: file, "REDRIVE_DATABASE_WAIT": "90s"}, args: []string{"--database-wait", "0s"}, want: 0},
		{args: []string{"--database-wait", "24h"}, want: 24 * time.Hour},
	} {
		c, err := loadConfig(t, tc.env, tc.args...)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.env, tc.args, err)
		}
		if c.DatabaseWait != tc.want {
			t.Errorf("%v %v: database wait %s, want %s", tc.env, tc.args, c.DatabaseWait, tc.want)
		}
	}
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		prefix string
	}{
		{args: []string{"--database-wait", "-1s"}, prefix: "--database-wait: "},
		{args: []string{"--database-wait", "25h"}, prefix: "--database-wait: "},
		{env: map[string]string{"REDRIVE_DATABASE_WAIT": "soon"}, prefix: "REDRIVE_DATABASE_WAIT: "},
		{env: map[string]string{FileEnv: writeFile(t, "bad.json", `{"database-wait": true}`)}, prefix: "database-wait: "},
	} {
		_, err := loadConfig(t, tc.env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.prefix) {
			t.Errorf("%v %v: error %v, want one naming %q", tc.env, tc.args, err, strings.TrimSuffix(tc.prefix, ": "))
		}
	}
}

// FuzzDatabaseWait: the flag, the variable and the file agree on every
// value, an accepted one is within bounds and is the duration given, and a
// refused one is refused with the setting named.
func FuzzDatabaseWait(f *testing.F) {
	for _, s := range []string{"15m", "0", "0s", "1ns", "24h", "24h0m1s", "-1s", " 3s ", "1e3s", "soon", "9223372036s", "1.5h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if v == "" {
			return // an empty variable counts as unset
		}
		path := filepath.Join(t.TempDir(), "redrive.json")
		b, err := json.Marshal(map[string]string{"database-wait": v})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var verdicts []error
		for _, src := range []struct {
			flags, env map[string]string
			prefix     string
		}{
			{flags: map[string]string{"database-wait": v}, prefix: "--database-wait: "},
			{env: map[string]string{"REDRIVE_DATABASE_WAIT": v}, prefix: "REDRIVE_DATABASE_WAIT: "},
			{env: map[string]string{FileEnv: path}, prefix: path + ": database-wait: "},
		} {
			if src.env[FileEnv] != "" && !utf8.ValidString(v) {
				continue // JSON would replace the invalid bytes: another value
			}
			c, err := fuzzLoad(t, src.flags, src.env)
			verdicts = append(verdicts, err)
			if err != nil {
				if !strings.HasPrefix(err.Error(), src.prefix) {
					t.Fatalf("%q: error does not name %s: %v", v, strings.TrimSuffix(src.prefix, ": "), err)
				}
				continue
			}
			checkValidConfig(t, c)
			d, perr := time.ParseDuration(strings.TrimSpace(v))
			if perr != nil || d != c.DatabaseWait || d < 0 || d > MaxDatabaseWait {
				t.Fatalf("%q: accepted as %s", v, c.DatabaseWait)
			}
		}
		for _, e := range verdicts[1:] {
			if (e == nil) != (verdicts[0] == nil) {
				t.Fatalf("%q: the sources disagree: %v", v, verdicts)
			}
		}
	})
}
