package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
)

// fmtCount writes n with thousands separators: 1,234,567.
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return sign + b.String()
}

// jobsWord words n jobs: "1 dead job", "1,234 dead jobs".
func jobsWord(n int64, adjective string) string {
	noun := "jobs"
	if n == 1 {
		noun = "job"
	}
	if adjective != "" {
		noun = adjective + " " + noun
	}
	return fmtCount(n) + " " + noun
}

// quoteIfNeeded leaves a plain value (letters, digits, -_.:/@+) as is and
// quotes any other, so that the words of a prompt stay unambiguous.
func quoteIfNeeded(v string) string {
	plain := v != "" && !strings.ContainsFunc(v, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("-_.:/@+", r)
	})
	if plain {
		return v
	}
	return strconv.Quote(v)
}

// dlqSelection words the n dead jobs fo selects, as a confirmation prompt
// names them: "1,234 dead jobs matching queue=mail", "all 1,234 dead
// jobs", or, when the count is unknown (n < 0), "the dead jobs matching
// queue=mail" and "every dead job".
func dlqSelection(n int64, fo filterOptions) string {
	cond := fo.describe()
	switch {
	case n < 0 && cond == "":
		return "every dead job"
	case n < 0:
		return "the dead jobs matching " + cond
	case cond == "" && n == 1:
		return "the only dead job"
	case cond == "":
		return "all " + jobsWord(n, "dead")
	}
	return jobsWord(n, "dead") + " matching " + cond
}

// nothingSelected says that fo selects no dead job, so there is nothing
// to do (verb: "purge", "redrive").
func nothingSelected(fo filterOptions, verb string) string {
	if cond := fo.describe(); cond != "" {
		return "no dead job matches " + cond + ": nothing to " + verb
	}
	return "the DLQ is empty: nothing to " + verb
}

// confirmDLQ counts the dead jobs fo selects and, when there are any,
// asks to confirm that Verb (a capitalized "Purge", "Redrive") applies
// to them, as confirm does; the question carries the count, the same
// with --server as directly. It returns the count: 0 means nothing to do
// and nothing was asked; -1, a server too old to count (the question then
// names the filter only).
func confirmDLQ(ctx context.Context, cmd *cobra.Command, b backend, yes bool, verb string, fo filterOptions) (int64, error) {
	n, err := b.Count(ctx, deadQuery(fo))
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	return n, confirm(cmd, yes, verb+" "+dlqSelection(n, fo)+"?")
}

// pageSummary words how many jobs a page shows of the total that match:
// "showing 50 of 1,234 jobs", or "showing 50 more of 1,234 dead jobs"
// for a page after the first. It is "" when the total is unknown.
func pageSummary(shown int, total int64, later, dead bool) string {
	if total < 0 {
		return ""
	}
	// The jobs may have changed between the page and the count.
	total = max(total, int64(shown))
	more := ""
	if later {
		more = " more"
	}
	adjective := ""
	if dead {
		adjective = "dead "
	}
	noun := "jobs"
	if total == 1 {
		noun = "job"
	}
	return fmt.Sprintf("showing %s%s of %s %s%s", fmtCount(int64(shown)), more, fmtCount(total), adjective, noun)
}
