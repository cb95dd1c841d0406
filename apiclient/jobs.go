package apiclient

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
)

// JobQuery selects jobs for a listing or a count: the filter's fields,
// States (GET /v1/jobs only; none: every state), and a page: Limit (0:
// the server's default) and Cursor (the Next of the page before).
type JobQuery struct {
	FilterBody
	States []string
	Limit  int
	Cursor string
	// Match selects the jobs whose payload holds a value:
	// payload.FIELD=VALUE, as the CLI's --match takes it.
	Match string
	// History, for listings only, asks for each job's history, which a
	// listing leaves out unless asked (Job has it).
	History bool
}

// values adds the filter to query parameters.
func (f FilterBody) values(v url.Values) {
	for _, p := range []struct{ k, v string }{
		{"queue", f.Queue}, {"kind", f.Kind}, {"class", f.Class}, {"reason", f.Reason},
		{"fingerprint", f.Fingerprint}, {"since", f.Since}, {"until", f.Until}, {"q", f.Q}, {"error_prefix", f.ErrorPrefix},
	} {
		if p.v != "" {
			v.Set(p.k, p.v)
		}
	}
}

// values returns the query's parameters; page adds its limit and cursor.
func (q JobQuery) values(page bool) url.Values {
	v := url.Values{}
	q.FilterBody.values(v)
	if len(q.States) > 0 {
		v.Set("state", strings.Join(q.States, ","))
	}
	if q.Match != "" {
		v.Set("match", q.Match)
	}
	if page {
		if q.Limit > 0 {
			v.Set("limit", strconv.Itoa(q.Limit))
		}
		if q.Cursor != "" {
			v.Set("cursor", q.Cursor)
		}
		if q.History {
			v.Set("history", "true")
		}
	}
	return v
}

// jobPath is the path of job id, and of its action when not "".
func jobPath(id int64, action string) string {
	p := "/v1/jobs/" + strconv.FormatInt(id, 10)
	if action != "" {
		p += "/" + action
	}
	return p
}

// Enqueue enqueues one job (POST /v1/jobs). An idempotency key already
// held by the same job answers that job; held by a different one, an
// *Error 409 idempotency_conflict unless in.ReturnExisting.
func (c *Client) Enqueue(ctx context.Context, in EnqueueRequest) (*redrive.Job, error) {
	var j redrive.Job
	if err := c.post(ctx, "/v1/jobs", in, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// EnqueueBatch enqueues up to MaxBatch jobs in one request (POST
// /v1/jobs/batch), all or none, and returns them in the order of jobs.
// A key conflict is an *Error 409 whose Field names the job at fault
// ("jobs[3].idempotency_key"); the jobs without conflict are enqueued.
func (c *Client) EnqueueBatch(ctx context.Context, jobs []EnqueueRequest) ([]*redrive.Job, error) {
	var res JobList
	if err := c.post(ctx, "/v1/jobs/batch", BatchRequest{Jobs: jobs}, &res); err != nil {
		return nil, err
	}
	if len(res.Jobs) != len(jobs) {
		return nil, fmt.Errorf("server: POST /v1/jobs/batch answered %d jobs for %d", len(res.Jobs), len(jobs))
	}
	return res.Jobs, nil
}

// MaxBatch bounds the jobs of one EnqueueBatch (the server's bound).
const MaxBatch = 1000

// Job returns job id with its history (GET /v1/jobs/{id}); a job that
// does not exist is an *Error 404.
func (c *Client) Job(ctx context.Context, id int64) (*redrive.Job, error) {
	var j redrive.Job
	if err := c.get(ctx, jobPath(id, ""), nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// CancelJob cancels a job that has not run yet (POST
// /v1/jobs/{id}/cancel); a job past that is an *Error 409.
func (c *Client) CancelJob(ctx context.Context, id int64) (*redrive.Job, error) {
	var j redrive.Job
	if err := c.post(ctx, jobPath(id, "cancel"), nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// RunJob makes a scheduled job (delayed, or waiting for a retry) due at
// once, without using an attempt (POST /v1/jobs/{id}/run), and returns
// it; a pending job comes back as it is, a running or finished one is an
// *Error 409.
func (c *Client) RunJob(ctx context.Context, id int64) (*redrive.Job, error) {
	var j redrive.Job
	if err := c.post(ctx, jobPath(id, "run"), nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// SetPriority changes the priority of a waiting job (POST
// /v1/jobs/{id}/priority) and returns the job. A job that no longer waits
// is a 409 (*Error, code "conflict"), a priority out of range a 400.
func (c *Client) SetPriority(ctx context.Context, id int64, priority int) (*redrive.Job, error) {
	var j redrive.Job
	if err := c.post(ctx, jobPath(id, "priority"), PriorityRequest{Priority: &priority}, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// ListJobs returns one page of the jobs q selects, the newest first (GET
// /v1/jobs), each with its Summary and without its History unless
// q.History. Its Next is the Cursor of the following page ("" on the
// last); JobPages walks them all.
func (c *Client) ListJobs(ctx context.Context, q JobQuery) (redrive.ListResult, error) {
	var res redrive.ListResult
	return res, c.get(ctx, "/v1/jobs", q.values(true), &res)
}

// CountJobs returns how many jobs q selects over all its pages (GET
// /v1/jobs/count); q's Limit and Cursor are not sent.
func (c *Client) CountJobs(ctx context.Context, q JobQuery) (int64, error) {
	var res CountResponse
	return res.Count, c.get(ctx, "/v1/jobs/count", q.values(false), &res)
}

// JobPages iterates over the pages of the jobs q selects, from q.Cursor
// on, until the last page or the first error (yielded with an empty
// page). A server answering a cursor it gave before, which would loop
// for ever, is an error.
func (c *Client) JobPages(ctx context.Context, q JobQuery) iter.Seq2[redrive.ListResult, error] {
	return pages(ctx, q, c.ListJobs)
}

// Jobs iterates over the jobs q selects, page after page (see JobPages).
func (c *Client) Jobs(ctx context.Context, q JobQuery) iter.Seq2[*redrive.Job, error] {
	return each(c.JobPages(ctx, q))
}

// pages walks the pages of a listing.
func pages(ctx context.Context, q JobQuery, list func(context.Context, JobQuery) (redrive.ListResult, error)) iter.Seq2[redrive.ListResult, error] {
	return func(yield func(redrive.ListResult, error) bool) {
		seen := map[string]bool{q.Cursor: true}
		for {
			res, err := list(ctx, q)
			if err != nil {
				yield(redrive.ListResult{}, err)
				return
			}
			if !yield(res, nil) || res.Next == "" {
				return
			}
			if seen[res.Next] {
				yield(redrive.ListResult{}, fmt.Errorf("server: the listing answered a cursor it gave before (%q) as the next: stopped", res.Next))
				return
			}
			seen[res.Next] = true
			q.Cursor = res.Next
		}
	}
}

// each yields the jobs of each page.
func each(pages iter.Seq2[redrive.ListResult, error]) iter.Seq2[*redrive.Job, error] {
	return func(yield func(*redrive.Job, error) bool) {
		for res, err := range pages {
			if err != nil {
				yield(nil, err)
				return
			}
			for _, j := range res.Jobs {
				if !yield(j, nil) {
					return
				}
			}
		}
	}
}

// Stats returns the counts per queue and state and the running totals
// (GET /v1/stats).
func (c *Client) Stats(ctx context.Context) (redrive.Stats, error) {
	var s redrive.Stats
	return s, c.get(ctx, "/v1/stats", nil, &s)
}

// SeriesQuery selects the statistics series: Since how far back (0: the
// server's default, an hour), Queue one queue ("": all).
type SeriesQuery struct {
	Since time.Duration
	Queue string
}

// Series returns the statistics minute by minute (GET /v1/stats/series).
func (c *Client) Series(ctx context.Context, q SeriesQuery) (SeriesResponse, error) {
	v := url.Values{}
	if q.Since > 0 {
		v.Set("since", q.Since.String())
	}
	if q.Queue != "" {
		v.Set("queue", q.Queue)
	}
	var res SeriesResponse
	return res, c.do(ctx, request{method: http.MethodGet, path: "/v1/stats/series", query: v}, &res)
}
