package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redrivehq/redrive"
	jobsummary "github.com/redrivehq/redrive/internal/summary"
	"github.com/redrivehq/redrive/store"
)

// writeTable writes a header and rows as aligned columns.
func writeTable(w io.Writer, header []string, rows func(row func(...any))) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	rows(func(cells ...any) {
		s := make([]string, len(cells))
		for i, c := range cells {
			s[i] = fmt.Sprint(c)
			if s[i] == "" {
				s[i] = "-"
			}
		}
		fmt.Fprintln(tw, strings.Join(s, "\t"))
	})
	return tw.Flush()
}

// writeJobList writes a page of jobs as a table, then summary (how many
// the page shows of how many, when not "") and the next page's cursor.
func writeJobList(out io.Writer, res redrive.ListResult, dead bool, summary string) error {
	if len(res.Jobs) == 0 {
		_, err := fmt.Fprintln(out, "no jobs")
		return err
	}
	var err error
	if dead {
		err = writeTable(out, []string{"ID", "QUEUE", "KIND", "SUMMARY", "CLASS", "REASON", "DEAD AT", "ERROR"}, func(row func(...any)) {
			for _, j := range res.Jobs {
				row(j.ID, j.Queue, j.Kind, oneLine(j.Summary, 48), j.LastErrorClass, j.DeadReason, fmtTimePtr(j.DeadAt), oneLine(j.LastError, 60))
			}
		})
	} else {
		err = writeTable(out, []string{"ID", "STATE", "QUEUE", "KIND", "SUMMARY", "ATTEMPT", "RUN AT", "LAST ERROR"}, func(row func(...any)) {
			for _, j := range res.Jobs {
				row(j.ID, j.State, j.Queue, j.Kind, oneLine(j.Summary, 48), j.Attempt, fmtTime(j.RunAt), oneLine(j.LastError, 60))
			}
		})
	}
	if err != nil {
		return err
	}
	if summary != "" {
		if _, err := fmt.Fprintln(out, summary); err != nil {
			return err
		}
	}
	if res.Next != "" {
		_, err = fmt.Fprintf(out, "more: --cursor %s\n", res.Next)
	}
	return err
}

func writeJob(out io.Writer, j *redrive.Job) error {
	fs := []field{
		{"id", strconv.FormatInt(j.ID, 10)}, {"state", string(j.State)}, {"queue", j.Queue}, {"kind", j.Kind},
		{"payload", oneLine(string(j.Payload), 200)}, {"attempt", strconv.Itoa(j.Attempt)},
		{"created", fmtTime(j.CreatedAt)}, {"run at", fmtTime(j.RunAt)},
	}
	if j.PayloadError != "" {
		fs[4].value = "(" + j.PayloadError + ")"
	}
	add := func(name, v string) {
		if v != "" && v != "-" {
			fs = append(fs, field{name, v})
		}
	}
	if j.MaxRetries >= 0 {
		add("max retries", strconv.Itoa(j.MaxRetries))
	}
	add("idempotency key", j.IdempotencyKey)
	add("dependency", j.Dependency)
	if j.Priority != redrive.DefaultPriority {
		add("priority", strconv.Itoa(j.Priority))
	}
	if j.Limit != nil {
		add("limit", limitLine(j))
	}
	if !j.Reprocessable {
		add("reprocessable", "no")
	}
	add("finished", fmtTimePtr(j.FinishedAt))
	add("worker", j.Worker)
	add("result", oneLine(string(j.Result), 200))
	if j.ResultError != "" {
		add("result", "("+j.ResultError+")")
	}
	if j.LastError != "" {
		if j.State == redrive.Completed {
			// The job succeeded since: its last error is not a current
			// failure.
			add("failed before success", oneLine(j.LastError, 200))
		} else {
			add("last error", oneLine(j.LastError, 200))
		}
		add("error class", j.LastErrorClass.String())
	}
	add("dead at", fmtTimePtr(j.DeadAt))
	add("dead reason", j.DeadReason)
	add("fingerprint", j.Fingerprint)
	if j.BlockedDependents > 0 {
		add("blocked dependents", strconv.FormatInt(j.BlockedDependents, 10)+" (workflow jobs waiting for this one)")
	}
	if j.Redriven > 0 {
		add("redriven", strconv.Itoa(j.Redriven))
	}
	if err := writeFields(out, "", fs); err != nil {
		return err
	}
	if len(j.History) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nhistory:")
	return writeTable(out, []string{"  AT", "EVENT", "ATTEMPT", "CLASS", "REASON", "DETAIL"}, func(row func(...any)) {
		for _, e := range j.History {
			detail := e.Error
			var attempt any = e.Attempt
			if e.Kind == store.EventDeferred {
				// A deferral uses no attempt: the job did not run.
				attempt = "-"
			}
			if gloss := eventGloss(e); gloss != "" {
				detail = strings.TrimSpace(gloss + "; " + detail)
				detail = strings.TrimSuffix(detail, ";")
			}
			if e.Note != "" {
				detail = strings.TrimSpace(detail + " note: " + e.Note)
			}
			if e.PreviousPayload != "" {
				detail = strings.TrimSpace(detail + " previous payload: " + e.PreviousPayload)
			}
			row("  "+fmtTime(e.At), e.Kind, attempt, e.Class, e.Reason, oneLine(detail, 80))
		}
	})
}

// eventGloss says in words what in a job's history uses no attempt: a
// deferral by an open breaker, an attempt a snooze or a shutdown gave
// back; "" for the other events.
func eventGloss(e store.Event) string {
	switch e.Kind {
	case store.EventDeferred:
		name, ok := strings.CutPrefix(e.Reason, "breaker_open:")
		if !ok || name == "" {
			name = "of its dependency"
		}
		s := "breaker " + name + " open: did not run, no attempt used"
		if e.Delay > 0 {
			s += ", deferred " + time.Duration(e.Delay).String()
		}
		return s
	case store.EventSnoozed:
		return fmt.Sprintf("snoozed: attempt %d given back, no attempt used", e.Attempt)
	case store.EventReleased:
		return fmt.Sprintf("shutdown interrupted it: attempt %d given back, no attempt used", e.Attempt)
	}
	return ""
}

func writeStats(out io.Writer, s redrive.Stats) error {
	queues := map[string]bool{}
	for q := range s.Jobs {
		queues[q] = true
	}
	for q := range s.Counters {
		queues[q] = true
	}
	if len(queues) == 0 {
		_, err := fmt.Fprintln(out, "no jobs")
		return err
	}
	names := make([]string, 0, len(queues))
	for q := range queues {
		names = append(names, q)
	}
	slices.Sort(names)
	states := []redrive.State{redrive.Pending, redrive.Scheduled, redrive.Running, redrive.Completed, redrive.Dead, redrive.Canceled}
	header := []string{"QUEUE"}
	for _, st := range states {
		header = append(header, strings.ToUpper(string(st)))
	}
	if err := writeTable(out, header, func(row func(...any)) {
		for _, q := range names {
			cells := []any{q}
			for _, st := range states {
				cells = append(cells, s.Jobs[q][st])
			}
			row(cells...)
		}
	}); err != nil {
		return err
	}
	fmt.Fprintln(out, "\ncounters:")
	return writeTable(out, []string{"  QUEUE", "COUNTER", "TOTAL"}, func(row func(...any)) {
		for _, q := range names {
			cs := make([]string, 0, len(s.Counters[q]))
			for c := range s.Counters[q] {
				cs = append(cs, c)
			}
			slices.Sort(cs)
			for _, c := range cs {
				row("  "+q, c, s.Counters[q][c])
			}
		}
	})
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

// oneLine flattens s to one line of at most n runes, its control and
// format characters escaped (summary.Printable).
func oneLine(s string, n int) string {
	s = jobsummary.Printable(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// clipArg shortens an argument quoted in an error.
func clipArg(s string) string { return oneLine(s, 64) }

// limitLine says which concurrency limit a job is under and the use of
// its group: "waiting on limit per-host (group example.com: 5 of 5
// running)" when the job waits on it.
func limitLine(j *redrive.Job) string {
	l := j.Limit
	group := fmt.Sprintf("%d of %d running", l.Running, l.Max)
	if l.Max == 0 {
		group = fmt.Sprintf("%d running", l.Running)
	}
	if !l.NextStart.IsZero() {
		group += ", next start " + l.NextStart.Local().Format(time.RFC3339)
	}
	if l.Key != "" {
		group = fmt.Sprintf("group %s: %s", l.Key, group)
	}
	if l.Waiting {
		return fmt.Sprintf("waiting on limit %s (%s)", l.Name, group)
	}
	return fmt.Sprintf("under limit %s (%s)", l.Name, group)
}
