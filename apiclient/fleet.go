package apiclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// Queues lists every queue, sorted by name (GET /v1/queues).
func (c *Client) Queues(ctx context.Context) ([]redrive.Queue, error) {
	var res QueueList
	return res.Queues, c.get(ctx, "/v1/queues", nil, &res)
}

// PauseQueue pauses a queue for the whole fleet: its jobs wait (POST
// /v1/queues/{name}/pause).
func (c *Client) PauseQueue(ctx context.Context, name string) (redrive.Queue, error) {
	var res QueueBody
	return res.Queue, c.post(ctx, "/v1/queues/"+segment(name)+"/pause", nil, &res)
}

// ResumeQueue resumes a paused queue (POST /v1/queues/{name}/resume).
func (c *Client) ResumeQueue(ctx context.Context, name string) (redrive.Queue, error) {
	var res QueueBody
	return res.Queue, c.post(ctx, "/v1/queues/"+segment(name)+"/resume", nil, &res)
}

// Workers lists the worker processes registered in the store, the most
// recently started first (GET /v1/workers).
func (c *Client) Workers(ctx context.Context) ([]redrive.WorkerStatus, error) {
	var res WorkerList
	return res.Workers, c.get(ctx, "/v1/workers", nil, &res)
}

// Schedules lists the periodic schedules, sorted by name (GET
// /v1/schedules).
func (c *Client) Schedules(ctx context.Context) ([]redrive.ScheduleInfo, error) {
	var res ScheduleList
	return res.Schedules, c.get(ctx, "/v1/schedules", nil, &res)
}

// Schedule returns one periodic schedule (GET /v1/schedules/{name}).
func (c *Client) Schedule(ctx context.Context, name string) (redrive.ScheduleInfo, error) {
	var res ScheduleBody
	return res.Schedule, c.get(ctx, "/v1/schedules/"+segment(name), nil, &res)
}

// PauseSchedule pauses a schedule: it enqueues nothing until resumed
// (POST /v1/schedules/{name}/pause).
func (c *Client) PauseSchedule(ctx context.Context, name string) (redrive.ScheduleInfo, error) {
	var res ScheduleBody
	return res.Schedule, c.post(ctx, "/v1/schedules/"+segment(name)+"/pause", nil, &res)
}

// ResumeSchedule resumes a paused schedule (POST
// /v1/schedules/{name}/resume).
func (c *Client) ResumeSchedule(ctx context.Context, name string) (redrive.ScheduleInfo, error) {
	var res ScheduleBody
	return res.Schedule, c.post(ctx, "/v1/schedules/"+segment(name)+"/resume", nil, &res)
}

// TriggerSchedule enqueues one job of the schedule now, and returns it
// (POST /v1/schedules/{name}/trigger).
func (c *Client) TriggerSchedule(ctx context.Context, name string) (*redrive.Job, error) {
	var j redrive.Job
	if err := c.post(ctx, "/v1/schedules/"+segment(name)+"/trigger", nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// DeleteSchedule deletes a schedule from the store (DELETE
// /v1/schedules/{name}); a process that still declares it declares it
// again when it starts.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/schedules/" + segment(name)}, nil)
}

// Breakers lists the fleet's circuit breakers (GET /v1/breakers).
func (c *Client) Breakers(ctx context.Context) ([]BreakerView, error) {
	var bs []BreakerView
	return bs, c.get(ctx, "/v1/breakers", nil, &bs)
}

// OpenBreaker forces a breaker open for the whole fleet, for d (0: until
// ResetBreaker) (POST /v1/breakers/{name}/open).
func (c *Client) OpenBreaker(ctx context.Context, name string, d time.Duration) (BreakerView, error) {
	var body any
	if d > 0 {
		body = BreakerOpenRequest{Duration: d.String()}
	}
	var res BreakerBody
	return res.Breaker, c.post(ctx, "/v1/breakers/"+segment(name)+"/open", body, &res)
}

// DeleteBreaker deletes a breaker's shared record (DELETE
// /v1/breakers/{name}): refused with 409 while it is in use (open by
// trips, half-open, reported on recently) unless force.
func (c *Client) DeleteBreaker(ctx context.Context, name string, force bool) error {
	r := request{method: http.MethodDelete, path: "/v1/breakers/" + segment(name)}
	if force {
		r.query = url.Values{"force": {"true"}}
	}
	return c.do(ctx, r, nil)
}

// ResetBreaker closes a breaker for the whole fleet (POST
// /v1/breakers/{name}/reset).
func (c *Client) ResetBreaker(ctx context.Context, name string) (BreakerView, error) {
	var res BreakerBody
	return res.Breaker, c.post(ctx, "/v1/breakers/"+segment(name)+"/reset", nil, &res)
}

// AMQPQueues lists the RabbitMQ queues `redrive serve --amqp-url`
// manages, with their depths (GET /v1/amqp/queues).
func (c *Client) AMQPQueues(ctx context.Context) ([]AMQPQueue, error) {
	var res AMQPQueueList
	return res.Queues, c.get(ctx, "/v1/amqp/queues", nil, &res)
}

// KafkaTopics lists the Kafka topics whose dead letters `redrive serve
// --kafka-topics` keeps, with their counts (GET /v1/kafka/topics).
func (c *Client) KafkaTopics(ctx context.Context) ([]KafkaTopic, error) {
	var res KafkaTopicList
	return res.Topics, c.get(ctx, "/v1/kafka/topics", nil, &res)
}

// OpenAPI returns the OpenAPI document describing the API (GET
// /v1/openapi.json).
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var doc json.RawMessage
	return doc, c.get(ctx, "/v1/openapi.json", nil, &doc)
}

// Health reports whether the server answers at all (GET /healthz): nil
// when it does.
func (c *Client) Health(ctx context.Context) error {
	return c.get(ctx, "/healthz", nil, nil)
}

// Ready reports whether the server is ready (GET /readyz): its store is
// reachable and writable. Not ready is an *Error 503 (code unavailable
// or not_writable).
func (c *Client) Ready(ctx context.Context) (Readiness, error) {
	var r Readiness
	return r, c.get(ctx, "/readyz", nil, &r)
}

// Limits lists the fleet's concurrency limits with their use now (GET
// /v1/limits).
func (c *Client) Limits(ctx context.Context) ([]store.LimitState, error) {
	var res LimitList
	return res.Limits, c.get(ctx, "/v1/limits", nil, &res)
}

// SetLimit changes a concurrency limit's max for the whole fleet (PUT
// /v1/limits/{name}); 0 removes the cap of a limit that has a rate.
func (c *Client) SetLimit(ctx context.Context, name string, max int) (store.LimitState, error) {
	var res LimitBody
	return res.Limit, c.do(ctx, request{method: http.MethodPut, path: "/v1/limits/" + segment(name), body: LimitSet{Max: &max}}, &res)
}

// SetLimitRate changes a limit's rate for the whole fleet (PUT
// /v1/limits/{name}): rate is "N/interval" ("50/s") or "none", burst 0
// keeps the limit's burst (1 for a limit that had no rate).
func (c *Client) SetLimitRate(ctx context.Context, name, rate string, burst int) (store.LimitState, error) {
	var res LimitBody
	body := LimitSet{Rate: &rate}
	if burst != 0 {
		body.Burst = &burst
	}
	return res.Limit, c.do(ctx, request{method: http.MethodPut, path: "/v1/limits/" + segment(name), body: body}, &res)
}

// ChangeLimit changes, for the whole fleet and at once, those of a
// limit's max, rate (with its burst) and hold on Retry-After that set
// gives (PUT /v1/limits/{name}): the server applies all of them in one
// transaction, or none.
func (c *Client) ChangeLimit(ctx context.Context, name string, set LimitSet) (store.LimitState, error) {
	var res LimitBody
	return res.Limit, c.do(ctx, request{method: http.MethodPut, path: "/v1/limits/" + segment(name), body: set}, &res)
}

// SetLimitHold turns a limit's hold on Retry-After on or off for the
// whole fleet (PUT /v1/limits/{name}).
func (c *Client) SetLimitHold(ctx context.Context, name string, on bool) (store.LimitState, error) {
	var res LimitBody
	return res.Limit, c.do(ctx, request{method: http.MethodPut, path: "/v1/limits/" + segment(name), body: LimitSet{HoldOnRetryAfter: &on}}, &res)
}
