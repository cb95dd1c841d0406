package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/httpjob"
	"github.com/redrivehq/redrive/internal/strictjson"
)

// maxSchedules bounds the schedules of serve's configuration.
const maxSchedules = 1000

// scheduleSettings are the periodic jobs serve declares: the "schedules"
// object of the config file (or --schedules, $REDRIVE_SCHEDULES, as JSON
// text).
var scheduleSettings = []setting{
	{name: "schedules", help: `periodic jobs, as a JSON object of schedule names to {"cron" (five fields or @daily...) or "every" (a duration), "time_zone", "kind", "queue", "payload", "missed" (skip or run_once), "grace", "max_retries", "dependency", "priority" (-100 to 100, higher first)}, e.g. {"nightly-sync":{"cron":"0 2 * * *","time_zone":"America/New_York","kind":"http","payload":{"url":"https://example.com/sync","method":"POST"},"missed":"run_once"}}`, apply: func(c *Serve, v string) error {
		ps, err := parseSchedules(v)
		c.Schedules = ps
		return err
	}},
}

// scheduleSpec is one schedule of the "schedules" setting.
type scheduleSpec struct {
	Cron       string          `json:"cron"`
	Every      string          `json:"every"`
	TimeZone   string          `json:"time_zone"`
	Kind       string          `json:"kind"`
	Queue      string          `json:"queue"`
	Payload    json.RawMessage `json:"payload"`
	Missed     string          `json:"missed"`
	Grace      string          `json:"grace"`
	MaxRetries *int            `json:"max_retries"`
	Dependency string          `json:"dependency"`
	Priority   *int            `json:"priority"`
}

// scheduleFields lists the fields of a schedule, for errors.
const scheduleFields = "cron, every, time_zone, kind, queue, payload, missed, grace, max_retries, dependency, priority"

// parseSchedules parses the "schedules" setting: a JSON object of
// schedule names to their specs, each checked as redrive.Periodic
// checks it. An error names the schedule and the field.
func parseSchedules(v string) ([]redrive.Periodic, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil || raw == nil {
		return nil, fmt.Errorf(`want a JSON object of schedule names to schedules, e.g. {"nightly":{"cron":"0 2 * * *","kind":"http","payload":{"url":"https://example.com/sync"}}}, got %s`, clipJSON([]byte(v)))
	}
	if err := strictjson.Check([]byte(v), nil); err != nil {
		return nil, err
	}
	if len(raw) > maxSchedules {
		return nil, fmt.Errorf("%d schedules, the limit is %d", len(raw), maxSchedules)
	}
	out := make([]redrive.Periodic, 0, len(raw))
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		p, err := parseSchedule(name, raw[name])
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// parseSchedule parses one schedule.
func parseSchedule(name string, raw json.RawMessage) (redrive.Periodic, error) {
	if err := redrive.CheckName("schedule name", name); err != nil {
		return redrive.Periodic{}, errors.New(strings.TrimPrefix(err.Error(), redrive.ErrInvalid.Error()+": "))
	}
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("schedule %q: %s: %s", name, field, fmt.Sprintf(format, args...))
	}
	var s scheduleSpec
	if err := strictjson.Decode(raw, &s); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			return redrive.Periodic{}, bad(ute.Field, "want a %s, got a JSON %s", ute.Type, ute.Value)
		}
		return redrive.Periodic{}, fmt.Errorf("schedule %q: want an object of %s: %v", name, scheduleFields, err)
	}
	p := redrive.Periodic{Name: name, Cron: s.Cron, TimeZone: s.TimeZone, Kind: s.Kind, Missed: redrive.Missed(s.Missed)}
	if s.Kind == "" {
		return redrive.Periodic{}, bad("kind", "required (http, or download with --download-dir)")
	}
	if len(s.Payload) > 0 {
		p.Payload = s.Payload
	}
	var err error
	if s.Every != "" {
		if p.Every, err = time.ParseDuration(strings.TrimSpace(s.Every)); err != nil {
			return redrive.Periodic{}, bad("every", "%q is not a duration such as 30s, 5m or 1h", s.Every)
		}
		if p.Every == 0 {
			return redrive.Periodic{}, bad("every", "%q is zero", s.Every)
		}
	}
	if s.Grace != "" {
		if p.Grace, err = time.ParseDuration(strings.TrimSpace(s.Grace)); err != nil {
			return redrive.Periodic{}, bad("grace", "%q is not a duration such as 30s, 5m or 1h", s.Grace)
		}
		if p.Grace <= 0 {
			return redrive.Periodic{}, bad("grace", "%q: want more than 0 (leave it out for the default, %s)", s.Grace, redrive.DefaultPeriodicGrace)
		}
	}
	if s.Queue != "" {
		p.Options = append(p.Options, redrive.InQueue(s.Queue))
	}
	if s.MaxRetries != nil {
		if *s.MaxRetries < 0 || *s.MaxRetries > maxRetriesSetting {
			return redrive.Periodic{}, bad("max_retries", "%d: want 0 to %d", *s.MaxRetries, maxRetriesSetting)
		}
		p.Options = append(p.Options, redrive.MaxRetries(*s.MaxRetries))
	}
	if s.Dependency != "" {
		p.Options = append(p.Options, redrive.Dependency(s.Dependency))
	}
	if s.Priority != nil {
		if *s.Priority < redrive.MinPriority || *s.Priority > redrive.MaxPriority {
			return redrive.Periodic{}, bad("priority", "%d: want an integer from %d to %d", *s.Priority, redrive.MinPriority, redrive.MaxPriority)
		}
		p.Options = append(p.Options, redrive.Priority(*s.Priority))
	}
	if err := p.Validate(); err != nil {
		// "periodic "x": invalid request: cron: ..." -> "schedule "x": cron: ..."
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("periodic %q: ", name))
		msg = strings.TrimPrefix(msg, redrive.ErrInvalid.Error()+": ")
		return redrive.Periodic{}, fmt.Errorf("schedule %q: %s", name, msg)
	}
	return p, nil
}

// resolveSchedules checks what the schedules need of the rest of the
// configuration: a kind serve runs, a queue serve's worker serves, and a
// payload that kind accepts, checked as serve's worker checks it at start
// (with the same kind options), so that a payload serve would stop on is
// refused here, naming the schedule.
func resolveSchedules(c *Serve) error {
	kinds := c.Kinds()
	if len(c.Schedules) == 0 {
		return nil
	}
	checks, err := c.payloadChecks()
	if err != nil {
		return err
	}
	for _, p := range c.Schedules {
		if !slices.Contains(kinds, p.Kind) {
			hint := ""
			if p.Kind == download.Kind {
				hint = "; the download kind needs " + DownloadDirSetting
			}
			return fmt.Errorf("schedules: schedule %q: kind: %q is not a kind serve runs (%s)%s", p.Name, p.Kind, strings.Join(kinds, ", "), hint)
		}
		r := redrive.Request{Queue: redrive.DefaultQueue}
		for _, o := range p.Options {
			o(&r)
		}
		if _, ok := c.Queues[r.Queue]; !ok {
			served := slices.Sorted(maps.Keys(c.Queues))
			return fmt.Errorf("schedules: schedule %q: queue: %q is not a queue serve works (%s): add it to queues", p.Name, r.Queue, strings.Join(served, ", "))
		}
		// The payload as the worker encodes it (parseSchedule keeps
		// the file's JSON; none is null).
		payload := json.RawMessage("null")
		if raw, ok := p.Payload.(json.RawMessage); ok {
			payload = raw
		}
		if len(payload) > redrive.DefaultMaxPayload {
			return fmt.Errorf("schedules: schedule %q: payload: %d bytes, the limit is %d", p.Name, len(payload), redrive.DefaultMaxPayload)
		}
		if check := checks[p.Kind]; check != nil {
			if err := check(payload); err != nil {
				return fmt.Errorf("schedules: schedule %q: %w", p.Name, err)
			}
		}
	}
	return nil
}

// HTTPOptions are the options of serve's http kind, without its
// breakers.
func (c *Serve) HTTPOptions() httpjob.Options {
	return httpjob.Options{BlockPrivate: !c.HTTPAllowPrivate, AllowLinkLocal: c.HTTPAllowLinkLocal, NoTraceParent: c.HTTPNoTraceParent,
		AllowLinkLocalSetting: "--http-allow-link-local", AllowPrivateSetting: "--http-allow-private", RedactHeaders: c.RedactHeaders}
}

// DownloadOptions are the options of serve's download kind, without its
// breakers and lookup; meaningful only when Download.Dir is set.
func (c *Serve) DownloadOptions() download.Options {
	return download.Options{Dir: c.Download.Dir, MaxBytes: c.Download.MaxBytes, Sources: c.Download.Sources,
		CheckpointBytes: c.Download.CheckpointBytes, RecordSHA256: c.Download.RecordSHA256,
		BlockPrivate: !c.HTTPAllowPrivate, AllowLinkLocal: c.HTTPAllowLinkLocal, NoTraceParent: c.HTTPNoTraceParent,
		AllowLinkLocalSetting: "--http-allow-link-local", AllowPrivateSetting: "--http-allow-private", RedactHeaders: c.RedactHeaders}
}

// payloadChecks are the payload checks of the kinds serve runs, made as
// serve makes them.
func (c *Serve) payloadChecks() (map[string]func(json.RawMessage) error, error) {
	checks := map[string]func(json.RawMessage) error{httpjob.Kind: httpjob.New(c.HTTPOptions()).Validate}
	if c.Download.Dir != "" {
		h, err := download.New(c.DownloadOptions())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", DownloadDirSetting, err)
		}
		checks[download.Kind] = h.Validate
	}
	return checks, nil
}
