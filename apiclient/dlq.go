package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/redrivehq/redrive"
)

// ListDead returns one page of the dead jobs q selects (GET /v1/dlq); q's
// States do not apply (the server refuses them).
func (c *Client) ListDead(ctx context.Context, q JobQuery) (redrive.ListResult, error) {
	var res redrive.ListResult
	return res, c.get(ctx, "/v1/dlq", q.values(true), &res)
}

// CountDead returns how many dead jobs f selects: how many a purge or a
// redrive by the same filter would touch (GET /v1/dlq/count).
func (c *Client) CountDead(ctx context.Context, f FilterBody) (int64, error) {
	var res CountResponse
	return res.Count, c.get(ctx, "/v1/dlq/count", JobQuery{FilterBody: f}.values(false), &res)
}

// DeadPages iterates over the pages of the dead jobs q selects (see
// JobPages).
func (c *Client) DeadPages(ctx context.Context, q JobQuery) iter.Seq2[redrive.ListResult, error] {
	return pages(ctx, q, c.ListDead)
}

// DeadJobs iterates over the dead jobs q selects, page after page.
func (c *Client) DeadJobs(ctx context.Context, q JobQuery) iter.Seq2[*redrive.Job, error] {
	return each(c.DeadPages(ctx, q))
}

// DeadGroups returns the dead jobs f selects grouped by cause, the
// largest group first, at most limit groups (0: the server's default)
// (GET /v1/dlq/groups).
func (c *Client) DeadGroups(ctx context.Context, f FilterBody, limit int) ([]redrive.Group, error) {
	v := url.Values{}
	f.values(v)
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var res GroupList
	return res.Groups, c.get(ctx, "/v1/dlq/groups", v, &res)
}

// StartRedrive starts a bulk redrive of dead jobs (POST /v1/dlq/redrive)
// and returns the operation, which a worker of the server's fleet runs;
// Follow follows it.
func (c *Client) StartRedrive(ctx context.Context, in RedriveBody) (Operation, error) {
	var ob OperationBody
	return ob.Operation, c.post(ctx, "/v1/dlq/redrive", in, &ob)
}

// StartPurge starts the deletion of the dead jobs f selects (DELETE
// /v1/dlq); an empty filter needs all, for every dead job.
func (c *Client) StartPurge(ctx context.Context, f FilterBody, all bool) (Operation, error) {
	v := url.Values{}
	f.values(v)
	if all {
		v.Set("all", "true")
	}
	var ob OperationBody
	return ob.Operation, c.do(ctx, request{method: http.MethodDelete, path: "/v1/dlq", query: v}, &ob)
}

// StartPurgeIDs starts the deletion of the dead jobs with these ids
// (DELETE /v1/dlq?id=11,12); ids that are not dead jobs are skipped.
func (c *Client) StartPurgeIDs(ctx context.Context, ids []int64) (Operation, error) {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	v := url.Values{"id": {strings.Join(parts, ",")}}
	var ob OperationBody
	return ob.Operation, c.do(ctx, request{method: http.MethodDelete, path: "/v1/dlq", query: v}, &ob)
}

// StartExport starts a folder export of dead jobs on the server's
// machine, under its export folder (POST /v1/dlq/export).
func (c *Client) StartExport(ctx context.Context, in ExportBody) (Operation, error) {
	var ob OperationBody
	return ob.Operation, c.post(ctx, "/v1/dlq/export", in, &ob)
}

// ExportDead streams the dead jobs f selects with their history (GET
// /v1/dlq/export, NDJSON). Read it with Next until io.EOF, and Close it.
// Only ctx bounds the stream (not WithTimeout).
func (c *Client) ExportDead(ctx context.Context, f FilterBody) (*ExportStream, error) {
	return c.ExportDeadWith(ctx, f, ExportOptions{})
}

// ExportOptions are the options of an NDJSON export (ExportDeadWith).
type ExportOptions struct {
	// Reveal shows the secrets of the payloads in clear (reveal=true;
	// admin role, recorded in the audit log).
	Reveal bool
	// Decrypt sends the payloads the server seals in plaintext, secrets
	// included (decrypt=true; admin role, recorded in the audit log).
	// Without it they come sealed, and the line's metadata says under
	// which key (payload_sealed).
	Decrypt bool
}

// ExportDeadWith is ExportDead with options.
func (c *Client) ExportDeadWith(ctx context.Context, f FilterBody, o ExportOptions) (*ExportStream, error) {
	v := url.Values{}
	f.values(v)
	if o.Reveal {
		v.Set("reveal", "true")
	}
	if o.Decrypt {
		v.Set("decrypt", "true")
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/dlq/export", query: v, accept: "application/x-ndjson"})
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		resp.Body.Close()
		return nil, fmt.Errorf("server: GET /v1/dlq/export answered %q, not application/x-ndjson (is the server older than this client?)", ct)
	}
	total := int64(-1)
	if n, err := strconv.ParseInt(resp.Header.Get("X-Total-Count"), 10, 64); err == nil && n >= 0 {
		total = n
	}
	return newExportStream(resp.Body, total), nil
}

// ExportStream is the answer of ExportDead: one ExportLine per dead job.
type ExportStream struct {
	// Total is how many dead jobs matched when the export started (-1:
	// the server did not say).
	Total int64
	body  io.ReadCloser
	dec   *json.Decoder
	n     int
	err   error
}

func newExportStream(body io.ReadCloser, total int64) *ExportStream {
	return &ExportStream{Total: total, body: body, dec: json.NewDecoder(body)}
}

// Next returns the next dead job; io.EOF after the last. A stream cut
// short, or a line holding no job, is an error, and so are the calls
// after it.
func (s *ExportStream) Next() (ExportLine, error) {
	if s.err != nil {
		return ExportLine{}, s.err
	}
	var line ExportLine
	err := s.dec.Decode(&line)
	switch {
	case errors.Is(err, io.EOF):
		s.err = io.EOF
	case err != nil:
		s.err = fmt.Errorf("server: export stream cut after %d job(s): %w", s.n, err)
	case line.Job == nil || line.Job.ID <= 0:
		s.err = fmt.Errorf("server: export line %d holds no job", s.n+1)
	default:
		s.n++
		return line, nil
	}
	return ExportLine{}, s.err
}

// Close ends the stream.
func (s *ExportStream) Close() error { return s.body.Close() }
