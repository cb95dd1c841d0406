package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/spf13/cobra"
)

// downloadURL is the URL of a download job's payload.
func downloadURL(j *redrive.Job) string {
	var p downloadPayload
	_ = json.Unmarshal(j.Payload, &p)
	return p.URL
}

// printDownloadJobs prints the jobs enqueued: their ids and URLs, or
// with --json the jobs.
func printDownloadJobs(out io.Writer, g *globalOptions, jobs []*redrive.Job) error {
	if g.JSON {
		return writeJSON(out, map[string]any{"jobs": jobs})
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, j := range jobs {
		fmt.Fprintf(tw, "%d\t%s\n", j.ID, downloadURL(j))
	}
	return tw.Flush()
}

// downloads words a number of downloads: "1 download", "3 downloads".
func downloads(n int) string {
	if n == 1 {
		return "1 download"
	}
	return fmt.Sprintf("%d downloads", n)
}

// printDownloadFailures lists the jobs that did not complete.
func printDownloadFailures(out io.Writer, failed []*redrive.Job) error {
	fmt.Fprintf(out, "%s failed:\n", downloads(len(failed)))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tURL\tSTATE\tREASON\tERROR")
	for _, j := range failed {
		reason := j.DeadReason
		if reason == "" {
			reason = "-"
		}
		msg := oneLine(j.LastError, 200)
		if msg == "" {
			msg = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", j.ID, downloadURL(j), j.State, reason, msg)
	}
	return tw.Flush()
}

// jobProgress is the progress a job reports (redrive.Progress), read
// from its JSON so that a server without progress reporting reads as
// none.
type jobProgress struct {
	Progress *struct {
		Done  int64 `json:"done"`
		Total int64 `json:"total"`
	} `json:"progress"`
}

// progressOf returns the bytes done and the total (-1: unknown) a job
// reports; ok is false when it reports nothing.
func progressOf(j *redrive.Job) (done, total int64, ok bool) {
	b, err := json.Marshal(j)
	if err != nil {
		return 0, 0, false
	}
	var p jobProgress
	if json.Unmarshal(b, &p) != nil || p.Progress == nil {
		return 0, 0, false
	}
	total = p.Progress.Total
	if total <= 0 {
		total = -1
	}
	return p.Progress.Done, total, true
}

// finalState reports whether a job has ended.
func finalState(s redrive.State) bool {
	return s == redrive.Completed || s == redrive.Dead || s == redrive.Canceled
}

// waitDownloads polls the jobs until each has ended, drawing one bar for
// the batch: jobs ended of all, and the bytes fetched when the jobs
// report them. It returns the jobs in their final states.
func waitDownloads(ctx context.Context, cmd *cobra.Command, g *globalOptions, b backend, jobs []*redrive.Job) ([]*redrive.Job, error) {
	bar := newProgressBar(cmd, g, "downloading")
	defer bar.finish()
	cur := make([]*redrive.Job, len(jobs))
	copy(cur, jobs)
	t := time.NewTicker(downloadPollEvery)
	defer t.Stop()
	for {
		ended, dead := 0, 0
		var bytesDone, bytesTotal int64
		withBytes, totalKnown := false, true
		for i, j := range cur {
			if !finalState(j.State) {
				nj, err := b.Get(ctx, j.ID)
				if err != nil {
					if ctx.Err() != nil {
						return nil, fmt.Errorf("stopped waiting (the downloads go on): %w", ctx.Err())
					}
					if isNotFound(err) {
						return nil, fmt.Errorf("job %d is gone (deleted?): %w", j.ID, err)
					}
					return nil, err
				}
				cur[i], j = nj, nj
			}
			if finalState(j.State) {
				ended++
				if j.State != redrive.Completed {
					dead++
				}
			}
			if d, tot, ok := progressOf(j); ok {
				withBytes = true
				bytesDone += d
				if tot < 0 {
					totalKnown = false
				} else {
					bytesTotal += tot
				}
			} else if j.State != redrive.Completed {
				totalKnown = false
			}
		}
		var detail []string
		if withBytes {
			if totalKnown {
				detail = append(detail, fmt.Sprintf("%s of %s", fmtBytes(bytesDone), fmtBytes(bytesTotal)))
			} else {
				detail = append(detail, fmtBytes(bytesDone))
			}
			if el := time.Since(bar.start).Seconds(); el >= 1 {
				detail = append(detail, fmtBytes(int64(float64(bytesDone)/el))+"/s")
			}
		}
		if dead > 0 {
			detail = append(detail, fmt.Sprintf("failed %d", dead))
		}
		bar.update(int64(ended), int64(len(cur)), strings.Join(detail, ", "))
		if ended == len(cur) {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped waiting (the downloads go on): %w", ctx.Err())
		case <-t.C:
		}
	}
}

// fmtBytes formats a byte count for people: 512 B, 1.5 KiB, 20.0 MiB.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
