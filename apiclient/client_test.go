package apiclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

var quiet = slog.New(slog.DiscardHandler)

// env is a real server (the server package on a SQLite store) and a
// client of it.
type env struct {
	t     *testing.T
	st    *sqlite.Store
	rc    *redrive.Client // the store's own client, for set-up and running operations
	c     *apiclient.Client
	url   string
	token string
}

func newEnv(t *testing.T, token string) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet, Synchronous: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rc := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	api := server.New(server.Options{Client: rc, Token: token, Logger: quiet})
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); _ = api.Close() })
	c, err := apiclient.New(srv.URL, apiclient.WithToken(token), apiclient.WithPollInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, st: st, rc: rc, c: c, url: srv.URL, token: token}
}

// bury makes n dead jobs of queue whose last error is msg.
func (e *env) bury(queue, msg string, n int) []int64 {
	e.t.Helper()
	ctx := context.Background()
	reqs := make([]redrive.Request, n)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "dead-kind", Queue: queue, Payload: map[string]int{"n": i}}
	}
	if _, err := e.rc.EnqueueMany(ctx, reqs); err != nil {
		e.t.Fatal(err)
	}
	now := time.Now()
	got, err := e.st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: n, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != n {
		e.t.Fatalf("fetch: %d, %v", len(got), err)
	}
	var ids []int64
	outs := make([]store.Outcome, len(got))
	for i, j := range got {
		outs[i] = store.Outcome{JobID: j.ID, Queue: queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w", Kind: store.Bury, At: now,
			Class: failure.Permanent, DeadReason: "permanent", Fingerprint: "permanent:" + msg, Error: msg,
			Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now, Class: "permanent", Error: msg}}
		ids = append(ids, j.ID)
	}
	if _, err := e.st.Finish(ctx, outs); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// run runs operation op in the test (the server runs none itself: a
// worker does), while follow follows it through the API.
func (e *env) run(op apiclient.Operation) apiclient.Operation {
	e.t.Helper()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := e.rc.RunOperation(ctx, op.ID, nil)
		done <- err
	}()
	final, err := e.c.Follow(ctx, op, apiclient.FollowOptions{})
	if err != nil {
		e.t.Fatalf("follow %s: %v", op.ID, err)
	}
	if err := <-done; err != nil {
		e.t.Fatalf("run %s: %v", op.ID, err)
	}
	return final
}

// wantAPIError checks that err is an *apiclient.Error of status, code
// and field.
func wantAPIError(t *testing.T, err error, status int, code, field string) *apiclient.Error {
	t.Helper()
	ae, ok := errors.AsType[*apiclient.Error](err)
	if !ok {
		t.Fatalf("error %v (%T), want an *apiclient.Error %d %s", err, err, status, code)
	}
	if ae.StatusCode != status || ae.Code != code || ae.Field != field {
		t.Fatalf("error %d %q field %q (%v), want %d %q field %q", ae.StatusCode, ae.Code, ae.Field, ae, status, code, field)
	}
	return ae
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://host", "http://", ":::"} {
		if _, err := apiclient.New(u); err == nil {
			t.Errorf("New(%q) took it", u)
		}
	}
}

func TestJobs(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	var ids []int64
	for i := range 5 {
		j, err := e.c.Enqueue(ctx, apiclient.EnqueueRequest{Kind: "mail", Queue: "q", Payload: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`), Delay: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	j, err := e.c.Job(ctx, ids[0])
	if err != nil || j.ID != ids[0] || j.Kind != "mail" || j.Queue != "q" || j.State != redrive.Scheduled {
		t.Fatalf("job %+v, %v", j, err)
	}
	n, err := e.c.CountJobs(ctx, apiclient.JobQuery{FilterBody: apiclient.FilterBody{Queue: "q"}, States: []string{"scheduled"}, Limit: 1})
	if err != nil || n != 5 {
		t.Fatalf("count %d, %v", n, err)
	}

	// The pages: 2, 2 and 1 jobs, every job once.
	var sizes []int
	var seen []int64
	for page, err := range e.c.JobPages(ctx, apiclient.JobQuery{States: []string{"scheduled"}, Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(page.Jobs))
		for _, j := range page.Jobs {
			seen = append(seen, j.ID)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(sizes, []int{2, 2, 1}) || !slices.Equal(seen, ids) {
		t.Fatalf("pages of %v, jobs %v, want %v", sizes, seen, ids)
	}
	// The job iterator stops when told.
	var first []int64
	for j, err := range e.c.Jobs(ctx, apiclient.JobQuery{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		if first = append(first, j.ID); len(first) == 3 {
			break
		}
	}
	if len(first) != 3 {
		t.Fatalf("jobs %v", first)
	}

	// Batch.
	jobs, err := e.c.EnqueueBatch(ctx, []apiclient.EnqueueRequest{{Kind: "a"}, {Kind: "b", Queue: "q2"}})
	if err != nil || len(jobs) != 2 || jobs[0].Kind != "a" || jobs[1].Queue != "q2" {
		t.Fatalf("batch %v, %v", jobs, err)
	}

	// Cancel, then cancel again: 409.
	cj, err := e.c.CancelJob(ctx, ids[1])
	if err != nil || cj.State != redrive.Canceled {
		t.Fatalf("cancel %+v, %v", cj, err)
	}
	_, err = e.c.CancelJob(ctx, ids[1])
	wantAPIError(t, err, http.StatusConflict, "conflict", "")
}

func TestErrors(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()

	_, err := e.c.Job(ctx, 999)
	ae := wantAPIError(t, err, http.StatusNotFound, "not_found", "id")
	if !apiclient.IsNotFound(err) || ae.Method != http.MethodGet || ae.Path != "/v1/jobs/999" || !strings.Contains(ae.Error(), "HTTP 404 not_found") {
		t.Fatalf("404: %+v %q", ae, ae.Error())
	}
	_, err = e.c.Enqueue(ctx, apiclient.EnqueueRequest{})
	wantAPIError(t, err, http.StatusBadRequest, "invalid", "kind")
	_, err = e.c.EnqueueBatch(ctx, []apiclient.EnqueueRequest{{Kind: "a"}, {Kind: "a", Delay: "soon"}})
	ae = wantAPIError(t, err, http.StatusBadRequest, "invalid", "jobs[1].delay")
	if !strings.HasSuffix(ae.Error(), ", field jobs[1].delay)") {
		t.Fatalf("message %q", ae.Error())
	}
	_, err = e.c.ListDead(ctx, apiclient.JobQuery{FilterBody: apiclient.FilterBody{Since: "yesterday"}})
	wantAPIError(t, err, http.StatusBadRequest, "invalid", "since")
	_, err = e.c.StartRedrive(ctx, apiclient.RedriveBody{})
	wantAPIError(t, err, http.StatusBadRequest, "filter_required", "ids")
	_, err = e.c.StartRedrive(ctx, apiclient.RedriveBody{Filter: &apiclient.FilterBody{Class: "bogus"}})
	wantAPIError(t, err, http.StatusBadRequest, "invalid", "filter.class")

	// Idempotency: the same key on a different job is 409 on the key.
	if _, err := e.c.Enqueue(ctx, apiclient.EnqueueRequest{Kind: "a", IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Enqueue(ctx, apiclient.EnqueueRequest{Kind: "b", IdempotencyKey: "k"})
	wantAPIError(t, err, http.StatusConflict, "idempotency_conflict", "idempotency_key")
	j, err := e.c.Enqueue(ctx, apiclient.EnqueueRequest{Kind: "b", IdempotencyKey: "k", ReturnExisting: true})
	if err != nil || j.Kind != "a" {
		t.Fatalf("return existing: %+v, %v", j, err)
	}

	// Names that escape their path segment stay names: the server sees
	// them whole (and refuses the path-like ones by the name rule).
	_, err = e.c.Schedule(ctx, "a b?c%")
	wantAPIError(t, err, http.StatusNotFound, "not_found", "name")
	for _, name := range []string{"..", ".", "a/b"} {
		_, err = e.c.Schedule(ctx, name)
		wantAPIError(t, err, http.StatusBadRequest, "invalid", "name")
	}
	_, err = e.c.Operation(ctx, "op_000000000000000000000000")
	wantAPIError(t, err, http.StatusNotFound, "not_found", "id")

	// A transport failure is no *Error.
	dead, err := apiclient.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Stats(ctx); err == nil || errors.As(err, new(*apiclient.Error)) {
		t.Fatalf("no server: %v", err)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, "s3cret")
	ctx := context.Background()
	if _, err := e.c.Stats(ctx); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	none, _ := apiclient.New(e.url)
	_, err := none.Stats(ctx)
	wantAPIError(t, err, http.StatusUnauthorized, "unauthorized", "")
	wrong, _ := apiclient.New(e.url, apiclient.WithToken("guess"))
	_, err = wrong.Queues(ctx)
	wantAPIError(t, err, http.StatusUnauthorized, "unauthorized", "")
	// /healthz needs no token.
	if err := none.Health(ctx); err != nil {
		t.Fatalf("health: %v", err)
	}
}

// TestHTTPClientAndTimeout: the client's own *http.Client sends the
// requests, and WithTimeout bounds a request the server never answers.
func TestHTTPClientAndTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" || strings.HasSuffix(r.URL.Path, "/v1/stats") {
			<-release
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>bad gateway</html>")
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	var used bool
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	// A generous timeout for the request that is answered (a loaded
	// machine may take longer than 50 ms), a short one for the hang.
	c, err := apiclient.New(srv.URL+"/prefix", apiclient.WithHTTPClient(hc), apiclient.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Queues(context.Background())
	ae := wantAPIError(t, err, http.StatusBadGateway, "bad_gateway", "")
	if !used || ae.Path != "/prefix/v1/queues" || !strings.Contains(ae.Message, "bad gateway") {
		t.Fatalf("non-JSON error: used %v, %+v", used, ae)
	}
	c, err = apiclient.New(srv.URL+"/prefix", apiclient.WithHTTPClient(hc), apiclient.WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stats(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hanging server: %v", err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestDLQ(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	ids := e.bury("mail", "smtp down", 3)
	e.bury("sms", "bad number", 2)

	n, err := e.c.CountDead(ctx, apiclient.FilterBody{Queue: "mail"})
	if err != nil || n != 3 {
		t.Fatalf("count %d, %v", n, err)
	}
	var dead []int64
	for j, err := range e.c.DeadJobs(ctx, apiclient.JobQuery{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, j.ID)
	}
	if len(dead) != 5 {
		t.Fatalf("dead jobs %v", dead)
	}
	gs, err := e.c.DeadGroups(ctx, apiclient.FilterBody{}, 0)
	if err != nil || len(gs) != 2 || gs[0].Count != 3 {
		t.Fatalf("groups %+v, %v", gs, err)
	}

	// The export stream.
	s, err := e.c.ExportDead(ctx, apiclient.FilterBody{Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	var exported []int64
	for {
		line, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if line.Error.LastError != "smtp down" || line.Error.Class != "permanent" || line.Error.JobID != line.Job.ID {
			t.Errorf("line %+v", line.Error)
		}
		exported = append(exported, line.Job.ID)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(exported)
	if s.Total != 3 || !slices.Equal(exported, ids) {
		t.Fatalf("export: total %d, %v, want %v", s.Total, exported, ids)
	}

	// Redrive by ids, run by "a worker" (the test).
	op, err := e.c.StartRedrive(ctx, apiclient.RedriveBody{IDs: ids[:2], Note: "fixed"})
	if err != nil || op.State != redrive.OperationPending || op.Kind != redrive.OperationRedrive {
		t.Fatalf("start %+v, %v", op, err)
	}
	if final := e.run(op); final.State != redrive.OperationDone || final.Redriven != 2 {
		t.Fatalf("redrive %+v", final)
	}
	// Purge needs a filter, or all.
	_, err = e.c.StartPurge(ctx, apiclient.FilterBody{}, false)
	wantAPIError(t, err, http.StatusBadRequest, "filter_required", "all")
	op, err = e.c.StartPurge(ctx, apiclient.FilterBody{Queue: "sms"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if final := e.run(op); final.State != redrive.OperationDone || final.Purged != 2 {
		t.Fatalf("purge %+v", final)
	}
	// Replay the jobs of mail, whatever their state.
	op, err = e.c.StartReplay(ctx, apiclient.ReplayBody{Filter: &apiclient.ReplayFilterBody{FilterBody: apiclient.FilterBody{Queue: "mail"}}})
	if err != nil {
		t.Fatal(err)
	}
	if final := e.run(op); final.State != redrive.OperationDone || final.Replayed != 3 {
		t.Fatalf("replay %+v", final)
	}
	// A folder export needs serve --export-dir.
	_, err = e.c.StartExport(ctx, apiclient.ExportBody{All: true, Dir: "x"})
	wantAPIError(t, err, http.StatusForbidden, "export_disabled", "dir")

	// The operations, newest first, one a page.
	var kinds []redrive.OperationKind
	for ops, err := range e.c.OperationPages(ctx, 1) {
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range ops {
			kinds = append(kinds, o.Kind)
		}
	}
	if !slices.Equal(kinds, []redrive.OperationKind{redrive.OperationReplay, redrive.OperationPurge, redrive.OperationRedrive}) {
		t.Fatalf("operations %v", kinds)
	}
}

func TestOperationControl(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.bury("q", "boom", 2)
	op, err := e.c.StartPurge(ctx, apiclient.FilterBody{}, true)
	if err != nil {
		t.Fatal(err)
	}
	// No worker: it stays pending, and can be paused and resumed.
	if p, err := e.c.PauseOperation(ctx, op.ID); err != nil || p.State != redrive.OperationPaused {
		t.Fatalf("pause %+v, %v", p, err)
	}
	if r, err := e.c.ResumeOperation(ctx, op.ID); err != nil || r.State != redrive.OperationPending {
		t.Fatalf("resume %+v, %v", r, err)
	}

	// Follow without CancelOnStop leaves it be when ctx ends...
	fctx, cancel := context.WithCancel(ctx)
	got, err := e.c.Follow(fctx, op, apiclient.FollowOptions{Report: func(apiclient.Operation) { cancel() }})
	if !errors.Is(err, context.Canceled) || got.State != redrive.OperationPending {
		t.Fatalf("follow: %+v, %v", got, err)
	}
	// ... and with it cancels it on the server.
	fctx, cancel = context.WithCancel(ctx)
	var reports []redrive.OperationState
	got, err = e.c.Follow(fctx, op, apiclient.FollowOptions{CancelOnStop: true, Report: func(o apiclient.Operation) {
		reports = append(reports, o.State)
		cancel()
	}})
	if !errors.Is(err, context.Canceled) || got.State != redrive.OperationCanceled ||
		!slices.Equal(reports, []redrive.OperationState{redrive.OperationPending, redrive.OperationCanceled}) {
		t.Fatalf("follow, cancel on stop: %+v, %v, reports %v", got, err, reports)
	}
	cur, err := e.c.Operation(ctx, op.ID)
	if err != nil || cur.State != redrive.OperationCanceled {
		t.Fatalf("after: %+v, %v", cur, err)
	}
	// A canceled operation cannot be resumed.
	_, err = e.c.ResumeOperation(ctx, op.ID)
	wantAPIError(t, err, http.StatusConflict, "conflict", "")
}

func TestFleet(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	if _, err := e.c.Enqueue(ctx, apiclient.EnqueueRequest{Kind: "a", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	qs, err := e.c.Queues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Name != "q" {
		t.Fatalf("queues %+v, %v", qs, err)
	}
	if q, err := e.c.PauseQueue(ctx, "q"); err != nil || !q.Paused {
		t.Fatalf("pause %+v, %v", q, err)
	}
	if q, err := e.c.ResumeQueue(ctx, "q"); err != nil || q.Paused {
		t.Fatalf("resume %+v, %v", q, err)
	}
	if ws, err := e.c.Workers(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("workers %+v, %v", ws, err)
	}
	st, err := e.c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if s, err := e.c.Series(ctx, apiclient.SeriesQuery{Since: 2 * time.Hour, Queue: "q"}); err != nil || s.Step != "1m" {
		t.Fatalf("series %+v, %v", s, err)
	}
	_, err = e.c.Series(ctx, apiclient.SeriesQuery{Since: 1000 * 24 * time.Hour})
	wantAPIError(t, err, http.StatusBadRequest, "invalid", "since")

	// Schedules: none declared here.
	if ss, err := e.c.Schedules(ctx); err != nil || len(ss) != 0 {
		t.Fatalf("schedules %+v, %v", ss, err)
	}
	for _, call := range []func() error{
		func() error { _, err := e.c.PauseSchedule(ctx, "nightly"); return err },
		func() error { _, err := e.c.ResumeSchedule(ctx, "nightly"); return err },
		func() error { _, err := e.c.TriggerSchedule(ctx, "nightly"); return err },
		func() error { return e.c.DeleteSchedule(ctx, "nightly") },
	} {
		wantAPIError(t, call(), http.StatusNotFound, "not_found", "name")
	}

	// Breakers: force one open for a while, then close it.
	b, err := e.c.OpenBreaker(ctx, "smtp", 10*time.Minute)
	if err != nil || !b.Forced || b.ReadyAt.IsZero() {
		t.Fatalf("open %+v, %v", b, err)
	}
	bs, err := e.c.Breakers(ctx)
	if err != nil || len(bs) != 1 || bs[0].Name != "smtp" {
		t.Fatalf("breakers %+v, %v", bs, err)
	}
	if b, err := e.c.ResetBreaker(ctx, "smtp"); err != nil || b.Forced {
		t.Fatalf("reset %+v, %v", b, err)
	}
	if b, err := e.c.OpenBreaker(ctx, "smtp", 0); err != nil || !b.Forced || !b.ReadyAt.IsZero() {
		t.Fatalf("open until closed %+v, %v", b, err)
	}

	if qs, err := e.c.AMQPQueues(ctx); err != nil || len(qs) != 0 {
		t.Fatalf("amqp %+v, %v", qs, err)
	}
	if ts, err := e.c.KafkaTopics(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("kafka %+v, %v", ts, err)
	}
	doc, err := e.c.OpenAPI(ctx)
	if err != nil || !strings.Contains(string(doc), `"openapi"`) {
		t.Fatalf("openapi %.80s, %v", doc, err)
	}
	if err := e.c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := e.c.Ready(ctx); err != nil || r.Status != "ready" {
		t.Fatalf("ready %+v, %v", r, err)
	}
}

// jsonFields returns the JSON names of t's fields, embedded structs'
// fields included, each with the type's JSON kind, recursively.
func jsonFields(t reflect.Type, prefix string, out map[string]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		out[prefix] = t.Kind().String()
		return
	}
	for f := range t.Fields() {
		if f.Anonymous {
			jsonFields(f.Type, prefix, out)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		jsonFields(f.Type, prefix+"."+name, out)
	}
}

// TestBrokerTypesMatch: the client's copies of the broker packages'
// answers have the same JSON fields and kinds as the originals (which it
// does not import, not to pull the broker clients into its users).
func TestBrokerTypesMatch(t *testing.T) {
	for _, c := range []struct{ mine, theirs reflect.Type }{
		{reflect.TypeFor[apiclient.AMQPQueue](), reflect.TypeFor[amqp.ManagedQueue]()},
		{reflect.TypeFor[apiclient.KafkaTopic](), reflect.TypeFor[kafka.ManagedTopic]()},
	} {
		mine, theirs := map[string]string{}, map[string]string{}
		jsonFields(c.mine, "", mine)
		jsonFields(c.theirs, "", theirs)
		if !reflect.DeepEqual(mine, theirs) {
			t.Errorf("%v has the JSON fields %v, %v has %v", c.mine, mine, c.theirs, theirs)
		}
	}
}
