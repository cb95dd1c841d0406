package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/config"
)

// TestGroupCommandUnknownSubcommand: a group command (jobs, dlq, queues,
// workers, policy, bench) refuses an unknown subcommand or argument with
// a suggestion, instead of printing its help and exiting 0; alone it
// still prints its help.
func TestGroupCommandUnknownSubcommand(t *testing.T) {
	clearConnEnv(t)
	_, stderr, err := runCLI(t, "jobs", "lss")
	if err == nil || !strings.Contains(stderr, `unknown command "lss" for "redrive jobs"; did you mean ls?`) {
		t.Errorf("jobs lss: %v %q", err, stderr)
	}
	if !strings.Contains(stderr, "Run 'redrive jobs --help' for usage.") {
		t.Errorf("jobs lss: no pointer to the help: %q", stderr)
	}
	root := newRootCmd()
	groups := 0
	for _, c := range root.Commands() {
		if !c.HasSubCommands() {
			continue
		}
		groups++
		_, stderr, err := runCLI(t, c.Name(), "nosuchthing")
		if err == nil || !strings.Contains(stderr, `unknown command "nosuchthing" for "redrive `+c.Name()+`"`) {
			t.Errorf("redrive %s nosuchthing: %v %q", c.Name(), err, stderr)
		}
		out, _, err := runCLI(t, c.Name())
		if err != nil || !strings.Contains(out, "Available Commands:") {
			t.Errorf("redrive %s alone: %v %q", c.Name(), err, out)
		}
	}
	if groups < 6 {
		t.Errorf("only %d group commands", groups)
	}
	if _, stderr, err := runCLI(t, "dlq", "redirve"); err == nil || !strings.Contains(stderr, "did you mean redrive?") {
		t.Errorf("dlq redirve: %v %q", err, stderr)
	}
}

// TestVersion: `redrive version` and `redrive --version` print the module
// version and the VCS commit and time of the build, "(devel)" when built
// from a work tree.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, err := runCLI(t, args...)
		if err != nil || !strings.HasPrefix(out, "redrive ") || !strings.HasSuffix(out, "\n") {
			t.Errorf("redrive %s: %v %q", args[0], err, out)
		}
	}
	old := readBuildInfo
	t.Cleanup(func() { readBuildInfo = old })
	readBuildInfo = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/redrivehq/redrive", Version: "v1.2.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-25T11:00:00Z"}}}, true
	}
	if out := mustCLI(t, "version"); out != "redrive v1.2.0 (commit 0123456789ab, 2026-11-25T11:00:00Z, go1.26.0)\n" {
		t.Errorf("version: %q", out)
	}
	readBuildInfo = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}}, true
	}
	if out := mustCLI(t, "--version"); out != "redrive (devel) (modified)\n" {
		t.Errorf("--version: %q", out)
	}
	readBuildInfo = func() (*debug.BuildInfo, bool) { return nil, false }
	if out := mustCLI(t, "version"); !strings.Contains(out, "(devel)") {
		t.Errorf("version without build information: %q", out)
	}
}

// TestFirstUseErrors runs in both modes: a redrive by id naming a job
// that does not exist or is not dead says which and fails; errors do not
// name the store; cancel refuses a dead job without --yes; --all and its
// old name --all-matching select the same dead jobs.
func TestFirstUseErrors(t *testing.T) {
	clearConnEnv(t)
	ts, srvDB := newTestServer(t, "")
	db := filepath.Join(t.TempDir(), "redrive.db")
	for _, mode := range []struct {
		name string
		pre  []string
		db   string
	}{{"direct", []string{"--db", db}, db}, {"server", []string{"--server", ts.URL}, srvDB}} {
		t.Run(mode.name, func(t *testing.T) {
			args := func(a ...string) []string { return append(append([]string{}, mode.pre...), a...) }
			enqueue := func() string {
				return strconv.FormatInt(decode[redrive.Job](t, mustCLI(t, args("--json", "enqueue", "email", "--queue", "mail")...)).ID, 10)
			}
			dead1, dead2 := enqueue(), enqueue()
			bury(t, mode.db, "mail")
			pending := enqueue()

			// Errors about a job name it, not the store.
			_, stderr, err := runCLI(t, args("jobs", "show", "99999")...)
			if err == nil || !strings.Contains(stderr, "job 99999 not found") || strings.Contains(stderr, "sqlite") {
				t.Errorf("jobs show 99999: %v %q", err, stderr)
			}
			_, stderr, err = runCLI(t, args("jobs", "cancel", "99999")...)
			if err == nil || !strings.Contains(stderr, "job 99999 not found") || strings.Contains(stderr, "sqlite") {
				t.Errorf("jobs cancel 99999: %v %q", err, stderr)
			}

			// A redrive by id redrives the dead jobs given and names the others.
			out, stderr, err := runCLI(t, args("dlq", "redrive", dead1, "99999", pending, "--yes")...)
			if err == nil || !strings.Contains(stderr, "job 99999 not found") ||
				!strings.Contains(stderr, "job "+pending+" is not dead (it is pending)") {
				t.Errorf("dlq redrive %s 99999 %s: %v %q", dead1, pending, err, stderr)
			}
			if !strings.Contains(out, "redriven 1 of 3 matched") {
				t.Errorf("dlq redrive output: %q", out)
			}
			if j := decode[redrive.Job](t, mustCLI(t, args("--json", "jobs", "show", dead1)...)); j.State != redrive.Pending {
				t.Errorf("job %s after the redrive: %s", dead1, j.State)
			}

			// Cancel refuses a dead job without --yes.
			_, stderr, err = runCLI(t, args("jobs", "cancel", dead2)...)
			want := "job " + dead2 + " is dead (in the DLQ); canceling removes it from the DLQ: use dlq purge, or --yes to cancel it anyway"
			if err == nil || !strings.Contains(stderr, want) {
				t.Errorf("jobs cancel of a dead job: %v %q", err, stderr)
			}
			if j := decode[redrive.Job](t, mustCLI(t, args("--json", "jobs", "show", dead2)...)); j.State != redrive.Dead {
				t.Errorf("job %s after the refused cancel: %s", dead2, j.State)
			}
			if out := mustCLI(t, args("jobs", "cancel", dead2, "--yes")...); !strings.Contains(out, "job "+dead2+": canceled") {
				t.Errorf("jobs cancel --yes: %q", out)
			}

			// --all and --all-matching (deprecated) redrive the same.
			bury(t, mode.db, "mail") // dead1 and pending
			out, stderr, err = runCLI(t, args("dlq", "redrive", "--all-matching", "--queue", "mail", "--yes")...)
			if err != nil || !strings.Contains(out, "redriven 2 of 2 matched") || !strings.Contains(stderr, "use --all") {
				t.Errorf("dlq redrive --all-matching: %v %q %q", err, out, stderr)
			}
			bury(t, mode.db, "mail")
			if out := mustCLI(t, args("dlq", "redrive", "--all", "--queue", "mail", "--yes")...); !strings.Contains(out, "redriven 2 of 2 matched") {
				t.Errorf("dlq redrive --all: %q", out)
			}
			if _, _, err := runCLI(t, args("dlq", "redrive", dead1, "--all")...); err == nil || !strings.Contains(err.Error(), "--all, not both") {
				t.Errorf("ids with --all: %v", err)
			}
			help := mustCLI(t, "dlq", "redrive", "--help")
			if regexp.MustCompile(`(?m)^\s+--all-matching`).MatchString(help) || !regexp.MustCompile(`(?m)^\s+--all\s`).MatchString(help) {
				t.Errorf("dlq redrive --help:\n%s", help)
			}
		})
	}
}

// TestRelativeSinceUntil: --since and --until take a duration back from
// now (1h, 30m, 7d) besides an RFC 3339 time, in both modes alike.
func TestRelativeSinceUntil(t *testing.T) {
	clearConnEnv(t)
	ts, srvDB := newTestServer(t, "")
	db := filepath.Join(t.TempDir(), "redrive.db")
	for _, mode := range []struct {
		name string
		pre  []string
		db   string
	}{{"direct", []string{"--db", db}, db}, {"server", []string{"--server", ts.URL}, srvDB}} {
		t.Run(mode.name, func(t *testing.T) {
			args := func(a ...string) []string { return append(append([]string{}, mode.pre...), a...) }
			mustCLI(t, args("enqueue", "email", "--queue", "mail")...)
			bury(t, mode.db, "mail")
			for _, c := range []struct {
				filter []string
				n      int
			}{
				{[]string{"--since", "1h"}, 1},
				{[]string{"--since", "7d", "--until", "30m"}, 0},
				{[]string{"--until", "1h"}, 0},
				{[]string{"--since", "2000-01-01T00:00:00Z", "--until", "0s"}, 1},
			} {
				res := decode[redrive.ListResult](t, mustCLI(t, args(append([]string{"--json", "dlq", "ls"}, c.filter...)...)...))
				if len(res.Jobs) != c.n {
					t.Errorf("dlq ls %v: %d jobs, want %d", c.filter, len(res.Jobs), c.n)
				}
				out := mustCLI(t, args(append([]string{"--json", "dlq", "count"}, c.filter...)...)...)
				if strings.TrimSpace(out) != `{"count":`+strconv.Itoa(c.n)+`}` {
					t.Errorf("dlq count %v: %s, want %d", c.filter, out, c.n)
				}
			}
			if out := mustCLI(t, args("dlq", "purge", "--since", "1h", "--yes")...); !strings.Contains(out, "purged 1 dead job(s)") {
				t.Errorf("dlq purge --since 1h: %q", out)
			}
			_, stderr, err := runCLI(t, args("dlq", "ls", "--since", "yesterday")...)
			if err == nil || !strings.Contains(stderr, "duration back from now") {
				t.Errorf("--since yesterday: %v %q", err, stderr)
			}
			_, stderr, err = runCLI(t, args("jobs", "ls", "--since", "1h", "--until", "7d")...)
			if err == nil || !strings.Contains(stderr, "until") {
				t.Errorf("--since 1h --until 7d: %v %q", err, stderr)
			}
		})
	}
}

// TestLogFormat: --log-format, $REDRIVE_LOG_FORMAT and the config key
// log-format choose text or JSON logs; auto (the default) is text on a
// terminal, JSON otherwise.
func TestLogFormat(t *testing.T) {
	t.Setenv(config.FileEnv, "")
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, nil, config.LogFormatAuto},
		{nil, []string{"--log-format", "json"}, config.LogFormatJSON},
		{map[string]string{"REDRIVE_LOG_FORMAT": "text"}, nil, config.LogFormatText},
		{map[string]string{"REDRIVE_LOG_FORMAT": "text"}, []string{"--log-format", "JSON"}, config.LogFormatJSON},
		{nil, []string{"--config", writeFile(t, "redrive.json", `{"log-format": "text"}`)}, config.LogFormatText},
		{nil, []string{"--config", writeFile(t, "redrive.json", `{"log_format": "auto"}`)}, config.LogFormatAuto},
	} {
		cfg, err := loadConfig(t, c.env, c.args...)
		if err != nil || cfg.LogFormat != c.want {
			t.Errorf("env %v args %v: %v, %+v; want %s", c.env, c.args, err, cfg, c.want)
		}
	}
	if _, err := loadConfig(t, nil, "--log-format", "xml"); err == nil || !strings.Contains(err.Error(), `--log-format: "xml": want text, json or auto`) {
		t.Errorf("--log-format xml: %v", err)
	}
	if _, err := loadConfig(t, map[string]string{"REDRIVE_LOG_FORMAT": "logfmt"}); err == nil || !strings.Contains(err.Error(), "REDRIVE_LOG_FORMAT") {
		t.Errorf("REDRIVE_LOG_FORMAT=logfmt: %v", err)
	}

	logLine := func(format string, terminal bool) string {
		old := stderrIsTerminal
		defer func() { stderrIsTerminal = old }()
		stderrIsTerminal = func(io.Writer) bool { return terminal }
		var b bytes.Buffer
		slog.New(newLogHandler(&b, format, slog.LevelInfo)).Info("serving", "addr", "127.0.0.1:8080")
		return b.String()
	}
	for _, c := range []struct {
		format   string
		terminal bool
		json     bool
	}{
		{config.LogFormatAuto, true, false}, {config.LogFormatAuto, false, true},
		{config.LogFormatText, false, false}, {config.LogFormatJSON, true, true},
	} {
		line := logLine(c.format, c.terminal)
		if isJSON := json.Valid([]byte(line)); isJSON != c.json || !strings.Contains(line, "serving") {
			t.Errorf("format %s, terminal %v: %q", c.format, c.terminal, line)
		}
	}
}

// TestCommandsDoNotCreateSchema: only migrate (and serve) create or
// migrate a PostgreSQL schema; another command given a schema that does
// not exist says so and creates nothing.
func TestCommandsDoNotCreateSchema(t *testing.T) {
	clearConnEnv(t)
	u := pgURL(t)
	schema := "redrive_typo_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	t.Cleanup(func() { dropSchema(t, u, schema) })
	pre := []string{"--database-url", u, "--schema", schema}
	for _, cmd := range [][]string{{"jobs", "ls"}, {"dlq", "ls"}, {"stats"}, {"queues", "ls"}, {"workers", "ls"}, {"dlq", "count"}, {"enqueue", "k"}} {
		_, stderr, err := runCLI(t, append(append([]string{}, pre...), cmd...)...)
		if err == nil || !strings.Contains(stderr, "schema "+schema+" does not exist (run redrive migrate)") {
			t.Errorf("%v: %v %q", cmd, err, stderr)
		}
		if schemaExists(t, u, schema) {
			t.Fatalf("%v created the schema", cmd)
		}
	}
	mustCLI(t, "migrate", "--database-url", u, "--schema", schema)
	if out := mustCLI(t, append(pre, "jobs", "ls")...); out != "no jobs\n" {
		t.Errorf("jobs ls after migrate: %q", out)
	}
}
