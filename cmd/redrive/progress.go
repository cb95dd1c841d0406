package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// barMode is how a progressBar shows itself.
type barMode int

const (
	// barOff shows nothing (--json without a terminal).
	barOff barMode = iota
	// barTTY redraws one line in place, at most every ttyEvery.
	barTTY
	// barPlain writes a plain line at most every plainEvery, for logs.
	barPlain
)

const (
	ttyEvery   = 100 * time.Millisecond
	plainEvery = 5 * time.Second
	barWidth   = 24
)

// stderrIsTerminal reports whether w is a terminal; tests replace it.
var stderrIsTerminal = isTerminal

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar shows the progress of a bulk operation (redrive, purge,
// export) on standard error: a bar redrawn in place when standard error
// is a terminal, otherwise a plain line every few seconds (nothing with
// --json, so that scripts reading both streams see only JSON). Standard
// output is never touched. It is not safe for concurrent use.
type progressBar struct {
	w     io.Writer
	mode  barMode
	label string
	now   func() time.Time

	start, drawn       time.Time
	done, total        int64
	detail             string
	updated, everDrawn bool
}

// newProgressBar returns the bar of cmd's bulk operation named label.
func newProgressBar(cmd *cobra.Command, g *globalOptions, label string) *progressBar {
	w := cmd.ErrOrStderr()
	mode := barPlain
	switch {
	case stderrIsTerminal(w):
		mode = barTTY
	case g.JSON:
		mode = barOff
	}
	return newBar(w, mode, label, time.Now)
}

func newBar(w io.Writer, mode barMode, label string, now func() time.Time) *progressBar {
	return &progressBar{w: w, mode: mode, label: label, now: now, start: now()}
}

// update reports done of total jobs (total < 0: unknown), with a detail
// such as "refused 2, skipped 0".
func (b *progressBar) update(done, total int64, detail string) {
	if b.mode == barOff {
		return
	}
	b.done, b.total, b.detail, b.updated = done, total, detail, true
	now := b.now()
	switch b.mode {
	case barTTY:
		if !b.everDrawn || now.Sub(b.drawn) >= ttyEvery {
			b.draw(now)
		}
	case barPlain:
		if now.Sub(b.start) >= plainEvery && now.Sub(b.drawn) >= plainEvery {
			b.draw(now)
		}
	}
}

// finish draws the last state on a terminal and ends the bar's line.
// Plain mode writes nothing more: the result follows on standard output.
func (b *progressBar) finish() {
	if b.mode != barTTY || !b.updated {
		return
	}
	b.draw(b.now())
	fmt.Fprintln(b.w)
}

func (b *progressBar) draw(now time.Time) {
	b.drawn, b.everDrawn = now, true
	elapsed := now.Sub(b.start)
	if b.mode == barTTY {
		// Carriage return, the line, then clear what a longer line left.
		fmt.Fprintf(b.w, "\r%s\x1b[K", b.ttyLine(elapsed))
		return
	}
	fmt.Fprintln(b.w, b.plainLine(elapsed))
}

// ttyLine is the bar: label [=====>     ] 42% 420/1000 35/s eta 16s detail.
func (b *progressBar) ttyLine(elapsed time.Duration) string {
	parts := []string{b.label}
	if total := b.shownTotal(); total >= 0 {
		frac := 1.0
		if total > 0 {
			frac = float64(b.done) / float64(total)
		}
		fill := int(frac * barWidth)
		bar := strings.Repeat("=", fill)
		if fill < barWidth {
			bar += ">" + strings.Repeat(" ", barWidth-fill-1)
		}
		parts = append(parts, "["+bar+"]", fmt.Sprintf("%3.0f%%", frac*100), fmt.Sprintf("%d/%d", b.done, total))
	} else {
		parts = append(parts, fmt.Sprintf("%d", b.done))
	}
	parts = append(parts, b.pace(elapsed)...)
	if b.detail != "" {
		parts = append(parts, b.detail)
	}
	return strings.Join(parts, "  ")
}

// plainLine is one log-friendly line: label: 420/1000 (42%), 35/s, eta 16s, detail.
func (b *progressBar) plainLine(elapsed time.Duration) string {
	var parts []string
	if total := b.shownTotal(); total >= 0 {
		pct := 100.0
		if total > 0 {
			pct = float64(b.done) / float64(total) * 100
		}
		parts = append(parts, fmt.Sprintf("%d/%d (%.0f%%)", b.done, total, pct))
	} else {
		parts = append(parts, fmt.Sprintf("%d", b.done))
	}
	parts = append(parts, b.pace(elapsed)...)
	if b.detail != "" {
		parts = append(parts, b.detail)
	}
	return b.label + ": " + strings.Join(parts, ", ")
}

// shownTotal is the total to draw against: unknown (-1) stays unknown,
// and a total passed (jobs that died meanwhile) grows to done.
func (b *progressBar) shownTotal() int64 {
	if b.total < 0 {
		return -1
	}
	return max(b.total, b.done)
}

// pace returns the rate and, with a known total, the time left; or the
// elapsed time while nothing is known yet.
func (b *progressBar) pace(elapsed time.Duration) []string {
	if elapsed < time.Second || b.done == 0 {
		return []string{fmtDuration(elapsed)}
	}
	rate := float64(b.done) / elapsed.Seconds()
	out := []string{fmtRate(rate)}
	if total := b.shownTotal(); total > b.done {
		out = append(out, "eta "+fmtDuration(time.Duration(float64(total-b.done)/rate*float64(time.Second))))
	} else {
		out = append(out, fmtDuration(elapsed))
	}
	return out
}

func fmtRate(r float64) string {
	switch {
	case r >= 10000:
		return fmt.Sprintf("%.0fk/s", r/1000)
	case r >= 1000:
		return fmt.Sprintf("%.1fk/s", r/1000)
	case r >= 10:
		return fmt.Sprintf("%.0f/s", r)
	}
	return fmt.Sprintf("%.1f/s", r)
}

// fmtDuration rounds d for a human: 0.4s, 12s, 3m05s, 2h10m.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
