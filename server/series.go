package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
)

// Bounds of GET /v1/stats/series.
const (
	// DefaultSeriesSince is how far back the series goes without a since
	// parameter.
	DefaultSeriesSince = time.Hour
	// MaxSeriesSince bounds the since parameter: the default retention of
	// the statistics snapshots.
	MaxSeriesSince = redrive.DefaultStatsRetention
)

// SeriesResponse is the answer of GET /v1/stats/series.
// It is the type of package apiclient, the API's Go client.
type SeriesResponse = apiclient.SeriesResponse

// parseSince parses the since parameter: a Go duration, or a whole
// number of days written "7d".
func parseSince(s string) (time.Duration, bool) { return ParseDuration(s) }

// ParseDuration parses a Go duration ("90m", "1h30m") or a whole number
// of days ("7d", from 0 to 1000): the durations of the API's since and
// until, of a breaker forced open, and of the CLI's duration flags.
func ParseDuration(s string) (time.Duration, bool) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 1000 || strings.HasPrefix(days, "+") {
			return 0, false
		}
		return time.Duration(n) * 24 * time.Hour, true
	}
	d, err := time.ParseDuration(s)
	return d, err == nil
}

func (a *api) series(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, "since", "queue")
	if err != nil {
		return err
	}
	d := DefaultSeriesSince
	if s := q.get("since"); s != "" {
		var ok bool
		d, ok = parseSince(s)
		if !ok || d <= 0 || d > MaxSeriesSince {
			return badRequest("since", "since must be a duration such as 30m, 1h or 7d, greater than 0 and at most 7d, got %q", clip(s))
		}
	}
	queue := q.get("queue")
	if err := checkName("queue", queue, maxName); err != nil {
		return err
	}
	s, err := a.client.Series(r.Context(), time.Now().Add(-d), queue)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, SeriesResponse{Step: "1m", Since: s.Since, Points: s.Points})
	return nil
}
