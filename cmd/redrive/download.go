package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/server"
)

// downloadKind is the kind of the built-in download jobs.
const downloadKind = download.Kind

// downloadPayload is the payload of a download job.
type downloadPayload = download.Payload

// downloadOptions are the flags of `redrive download`.
type downloadOptions struct {
	dest       string
	maxRetries int
	queue      string
	sha256     string
	fromFile   string
	source     string
	wait       bool
	// overwrite is nil unless --overwrite was given: the payload then
	// leaves it out, and the kind's default (replace) applies.
	overwrite *bool
}

// downloadPollEvery is how often --wait reads the jobs' states.
var downloadPollEvery = 250 * time.Millisecond

// newDownloadCmd is `redrive download URL...`.
func newDownloadCmd(g *globalOptions) *cobra.Command {
	var (
		c = connOptions{create: true}
		o downloadOptions
	)
	cmd := &cobra.Command{
		Use:   "download URL...",
		Short: "Enqueue download jobs: the server fetches each URL (http, https, or s3:// with --source) into its --download-dir",
		Long: `Enqueue one job of the built-in download kind per URL, in batches: the server
(redrive serve --download-dir DIR) fetches each URL into a file under DIR,
written to a temporary file, synced and renamed into place whole; a failed
attempt is retried by the queue's policy and resumes where it stopped (Range).

URLs come from the arguments and from --from-file (a file, or - for standard
input): one per line, blank lines and lines starting with # skipped. Each
file goes into --dest, a directory relative to the server's download folder
(default: the folder itself), under the name the server's answer gives
(Content-Disposition) or else the URL's last path segment. --sha256 checks
the file's hash (one URL only): a file that does not match is not kept.
A file already at that name is replaced; with --overwrite=false the job
fails instead (permanent, reason "exists", naming the file) and the file is
left as it is.

An s3://bucket/key URL is read from the S3-compatible store that --source
names among the server's --download-sources, with that source's
credentials (the server's: none are sent with the job). Every URL of one
command then is an s3:// URL of that source.

A server without --download-dir refuses the jobs before anything is
enqueued, and so does the command directly on a store (--db,
--database-url) whose live workers of the queue do not run the download
kind.

The ids of the jobs enqueued are printed, one per line with its URL. A bad
URL or --dest refuses the whole batch: nothing is enqueued.

With --wait the command follows the jobs until each one has ended, showing
one progress bar for the batch on standard error, and exits non-zero if any
ended dead (or canceled), listing each with its id, URL, dead reason and last
error. Ctrl-C stops waiting, not the downloads.
` + connHelp,
		Args: cobra.ArbitraryArgs,
	}
	overwrite := true
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if cmd.Flags().Changed("overwrite") {
			o.overwrite = &overwrite
		}
		urls, err := downloadURLs(cmd, args, o.fromFile)
		if err != nil {
			return err
		}
		jobs, err := downloadRequests(cmd, urls, o)
		if err != nil {
			return err
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			return runDownload(ctx, cmd, g, b, jobs, o.wait)
		})(cmd, args)
	}
	f := cmd.Flags()
	f.StringVar(&o.dest, "dest", "", "directory of the files, relative to the server's --download-dir (default: that directory)")
	f.IntVar(&o.maxRetries, "max-retries", 0, "retries after the first attempt (default: the queue's policy)")
	f.StringVar(&o.queue, "queue", "", "queue (default \"default\")")
	f.StringVar(&o.sha256, "sha256", "", "expected SHA-256 of the file, in hex (one URL only)")
	f.StringVar(&o.source, "source", "", "the server's S3 source (--download-sources) that s3://bucket/key URLs are read from")
	f.StringVar(&o.fromFile, "from-file", "", "read URLs from this file, one per line (- for standard input)")
	f.BoolVar(&overwrite, "overwrite", true, "replace a file already at the final name (--overwrite=false: fail the job, keeping the file)")
	f.BoolVar(&o.wait, "wait", false, "wait until every job has ended, with a progress bar; exit non-zero if any failed")
	addConnFlags(cmd, &c)
	return cmd
}

// maxDownloadURLs bounds the URLs of one command.
const maxDownloadURLs = 1000000

// downloadURLs collects the URLs of the arguments and of the file named
// by from ("-": standard input), in that order.
func downloadURLs(cmd *cobra.Command, args []string, from string) ([]string, error) {
	var urls []string
	for _, a := range args {
		if a = strings.TrimSpace(a); a != "" {
			urls = append(urls, a)
		}
	}
	if from != "" {
		var r io.Reader
		name := from
		if from == "-" {
			r, name = cmd.InOrStdin(), "standard input"
		} else {
			f, err := os.Open(from)
			if err != nil {
				return nil, flagErrorf(cmd, "--from-file: %v", err)
			}
			defer f.Close()
			r = f
		}
		read, err := readURLList(r)
		if err != nil {
			return nil, fmt.Errorf("--from-file %s: %w", name, err)
		}
		urls = append(urls, read...)
	}
	if len(urls) == 0 {
		return nil, flagErrorf(cmd, "no URL given: pass URLs as arguments or with --from-file")
	}
	if len(urls) > maxDownloadURLs {
		return nil, flagErrorf(cmd, "%d URLs: the limit of one command is %d", len(urls), maxDownloadURLs)
	}
	return urls, nil
}

// readURLList reads one URL a line; blank lines and lines starting with
// # (after white space) are skipped.
func readURLList(r io.Reader) ([]string, error) {
	var urls []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if strings.ContainsAny(s, " \t") {
			return nil, fmt.Errorf("line %d: %q is not one URL (one URL a line)", line, clipArg(s))
		}
		urls = append(urls, s)
	}
	return urls, sc.Err()
}

// downloadRequests checks the flags and URLs and returns the enqueue
// requests. Only what the CLI can judge is checked here (an http or https
// URL, a hex hash); the server checks the rest of each payload.
func downloadRequests(cmd *cobra.Command, urls []string, o downloadOptions) ([]server.EnqueueRequest, error) {
	if o.sha256 != "" {
		if len(urls) != 1 {
			return nil, flagErrorf(cmd, "--sha256 is the hash of one file: give exactly one URL (got %d)", len(urls))
		}
		if b, err := hex.DecodeString(o.sha256); err != nil || len(b) != 32 {
			return nil, flagErrorf(cmd, "--sha256 must be 64 hex digits, got %q", clipArg(o.sha256))
		}
	}
	var maxRetries *int
	if cmd.Flags().Changed("max-retries") {
		if o.maxRetries < 0 {
			return nil, flagErrorf(cmd, "--max-retries must not be negative")
		}
		maxRetries = &o.maxRetries
	}
	dest := strings.TrimSpace(o.dest)
	if dest != "" && !strings.HasSuffix(dest, "/") {
		// A directory: the server names the file.
		dest += "/"
	}
	source := strings.TrimSpace(o.source)
	reqs := make([]server.EnqueueRequest, len(urls))
	for i, raw := range urls {
		if source != "" {
			if _, _, err := download.ParseS3URL(raw); err != nil {
				return nil, flagErrorf(cmd, "--source %s reads s3://bucket/key URLs: %v", clipArg(source), err)
			}
		} else if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			if u != nil && strings.EqualFold(u.Scheme, "s3") {
				return nil, flagErrorf(cmd, "%q: an s3:// URL needs --source, naming the server's S3 source (--download-sources) it is read from", clipArg(raw))
			}
			return nil, flagErrorf(cmd, "%q is not an http or https URL", clipArg(raw))
		}
		payload, err := json.Marshal(downloadPayload{URL: raw, Source: source, Dest: dest, SHA256: strings.ToLower(o.sha256), Overwrite: o.overwrite})
		if err != nil {
			return nil, err
		}
		reqs[i] = server.EnqueueRequest{Kind: downloadKind, Queue: o.queue, Payload: payload, MaxRetries: maxRetries}
	}
	return reqs, nil
}

// runDownload enqueues the jobs, prints them and, with wait, follows them
// to their end.
func runDownload(ctx context.Context, cmd *cobra.Command, g *globalOptions, b backend, reqs []server.EnqueueRequest, wait bool) error {
	out := cmd.OutOrStdout()
	jobs, err := enqueueDownloads(ctx, b, reqs)
	if ke, ok := errors.AsType[*redrive.KindError](err); ok && ke.Kind == downloadKind {
		// Directly on a store, the refusal of the kind check: say what a
		// server without --download-dir says.
		err = fmt.Errorf("%w: %w", err, errDownloadOff)
	}
	if err != nil {
		if len(jobs) > 0 {
			// Earlier batches went in: say which, then the error.
			_ = printDownloadJobs(out, g, jobs)
			return fmt.Errorf("%d of %d download jobs enqueued (listed above), then: %w", len(jobs), len(reqs), err)
		}
		return err
	}
	if len(jobs) > 0 && jobs[0].Warning != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", jobs[0].Warning)
	}
	if !wait {
		return printDownloadJobs(out, g, jobs)
	}
	if !g.JSON {
		if err := printDownloadJobs(out, g, jobs); err != nil {
			return err
		}
	}
	final, err := waitDownloads(ctx, cmd, g, b, jobs)
	if err != nil {
		return err
	}
	var failed []*redrive.Job
	for _, j := range final {
		if j.State != redrive.Completed {
			failed = append(failed, j)
		}
	}
	if g.JSON {
		if err := writeJSON(out, map[string]any{"jobs": final}); err != nil {
			return err
		}
	} else if len(failed) > 0 {
		if err := printDownloadFailures(out, failed); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "%s completed\n", downloads(len(final)))
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d downloads failed", len(failed), len(final))
	}
	return nil
}

// enqueueDownloads enqueues the jobs in batches of server.MaxBatch, each
// batch all or nothing. It returns the jobs enqueued before an error too.
func enqueueDownloads(ctx context.Context, b backend, reqs []server.EnqueueRequest) ([]*redrive.Job, error) {
	var jobs []*redrive.Job
	for start := 0; start < len(reqs); start += server.MaxBatch {
		batch := reqs[start:min(start+server.MaxBatch, len(reqs))]
		got, err := b.EnqueueBatch(ctx, batch)
		if err != nil {
			return jobs, err
		}
		jobs = append(jobs, got...)
	}
	return jobs, nil
}
