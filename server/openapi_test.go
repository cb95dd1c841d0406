package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/store"
)

// The conformance test below runs every operation openapi.json documents
// against a real server (a SQLite store, real HTTP) and validates each
// request it sends and each answer it gets against the document, with
// kin-openapi. It is driven by the document: a good call of an operation
// is built from the examples the document gives (parameters, bodies), so
// a route added with its documentation is tested without a change here,
// and one added without fails TestOpenAPIRoutes.

// conformanceToken is the token of the servers the test runs with one.
const conformanceToken = "conformance-token"

// conformanceMaxBody is the body bound of the test's servers: small, so
// that the 413 probe sends little.
const conformanceMaxBody = 64 << 10

// loadOpenAPI parses openapi.json and checks it is valid OpenAPI 3,
// examples included.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapiSpec)
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("openapi.json is not valid OpenAPI 3: %v", err)
	}
	return doc
}

// TestOpenAPIValid lints the document: valid OpenAPI 3, a server, an
// operationId and a summary on every operation.
func TestOpenAPIValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if len(doc.Servers) == 0 {
		t.Error("openapi.json has no servers")
	}
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" || op.Summary == "" {
				t.Errorf("%s: no operationId or summary", where)
			}
			if other, ok := ids[op.OperationID]; ok {
				t.Errorf("%s and %s share operationId %s", where, other, op.OperationID)
			}
			ids[op.OperationID] = where
		}
	}
}

// docPattern turns a ServeMux pattern into the document's path: "/{$}"
// is "/", and a subtree "/ui/" is "/ui/{...}" (one path parameter).
func docPattern(pattern string) (method, path string, subtree bool) {
	method, path, _ = strings.Cut(pattern, " ")
	switch {
	case strings.HasSuffix(path, "/{$}"):
		path = strings.TrimSuffix(path, "{$}")
	case strings.HasSuffix(path, "/"):
		subtree = true
	}
	return method, path, subtree
}

// TestOpenAPIRoutes checks that the document describes every route the
// server registers (the API's and the dashboard's), and nothing else.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	registered := append(slices.Clone(routes), dashboardRoutes...)
	for _, p := range registered {
		method, path, subtree := docPattern(p)
		key := method + " " + path
		if subtree {
			// One documented path of one parameter under the subtree.
			key = ""
			for d := range documented {
				m, dp, _ := strings.Cut(d, " ")
				rest, ok := strings.CutPrefix(dp, path)
				if m == method && ok && strings.HasPrefix(rest, "{") && strings.Count(rest, "{") == 1 && strings.HasSuffix(rest, "}") {
					key = d
				}
			}
		}
		if !documented[key] {
			t.Errorf("the server registers %s, which openapi.json does not describe", p)
			continue
		}
		delete(documented, key)
	}
	for d := range documented {
		t.Errorf("openapi.json describes %s, which the server does not register", d)
	}
}

// docOperation is one documented operation.
type docOperation struct {
	method, path string
	item         *openapi3.PathItem
	op           *openapi3.Operation
}

func (o docOperation) String() string { return o.method + " " + o.path }

// docOperations lists the document's operations in a stable order.
func docOperations(doc *openapi3.T) []docOperation {
	var ops []docOperation
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops = append(ops, docOperation{method: method, path: path, item: item, op: op})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].String() < ops[j].String() })
	return ops
}

// needsAuth reports whether the operation needs credentials when the
// server has a token: its security (the document's when it has none)
// has a requirement that names a scheme.
func (o docOperation) needsAuth(doc *openapi3.T) bool {
	sec := doc.Security
	if o.op.Security != nil {
		sec = *o.op.Security
	}
	for _, req := range sec {
		if len(req) > 0 {
			return true
		}
	}
	return false
}

// params lists the operation's parameters, the path item's included.
func (o docOperation) params() openapi3.Parameters {
	ps := slices.Clone(o.item.Parameters)
	return append(ps, o.op.Parameters...)
}

// fixtures are the values the test's store holds, for the parameters an
// example cannot give (an operation's id is random, a cursor is made by
// the server).
type fixtures struct {
	// values overrides the example of a parameter (in the path or the
	// query), by path and name.
	values map[string]map[string]string
	// body overrides the body of an operation, by "METHOD path".
	body map[string]string
	// query are query parameters every call of an operation carries, by
	// "METHOD path" (a purge needs a filter).
	query map[string]url.Values
	// alone are, by "METHOD path", the query parameters that replace the
	// query above rather than join it (a purge's id takes no filter).
	alone map[string][]string
}

// exchange is one request to the server and its answer.
type exchange struct {
	op      docOperation
	req     *http.Request
	reqBody []byte
	params  map[string]string
	status  int
	header  http.Header
	body    []byte
}

// conformance validates exchanges against the document.
type conformance struct {
	t   *testing.T
	doc *openapi3.T
	// exercised counts the validated exchanges of each operation, and
	// succeeded its 2xx and 3xx answers.
	exercised, succeeded map[string]int
	// mu guards the maps, shared by the parallel subtests.
	mu *sync.Mutex
	// tooLarge is the server's answer to a request whose headers are too
	// large.
	tooLarge *exchange
}

// authenticate stands in for the server's check of credentials in the
// request validation: a scheme is satisfied when the request carries
// its credential (right or not: the server judges that).
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	s := in.SecurityScheme
	switch {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			return errors.New("no bearer token")
		}
	case s.Type == "apiKey" && s.In == "cookie":
		if _, err := r.Cookie(s.Name); err != nil {
			return fmt.Errorf("no %s cookie", s.Name)
		}
	case s.Type == "apiKey" && s.In == "header":
		if r.Header.Get(s.Name) == "" {
			return fmt.Errorf("no %s header", s.Name)
		}
	default:
		return fmt.Errorf("security scheme %s %s not checked by the test", s.Type, s.Scheme)
	}
	return nil
}

// plainBody decodes a text body (HTML, CSS, JavaScript) as a string.
func plainBody(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	b, err := io.ReadAll(body)
	return string(b), err
}

// ndjsonBody checks every line of a JSON Lines body against the schema
// (which describes one line), and returns the first.
func ndjsonBody(body io.Reader, _ http.Header, schema *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	var first any
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("line %d is not JSON: %w", i+1, err)
		}
		if err := schema.Value.VisitJSON(v); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if i == 0 {
			first = v
		}
	}
	return first, nil
}

func init() {
	for _, ct := range []string{"text/html", "text/css", "text/javascript"} {
		openapi3filter.RegisterBodyDecoder(ct, plainBody)
	}
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonBody)
}

// route is the kin-openapi route of an operation.
func (c *conformance) route(o docOperation) *routers.Route {
	var srv *openapi3.Server
	if len(c.doc.Servers) > 0 {
		srv = c.doc.Servers[0]
	}
	return &routers.Route{Spec: c.doc, Server: srv, Path: o.path, PathItem: o.item, Method: o.method, Operation: o.op}
}

// send sends the request to the server, checks the request against the
// document when wantValid (a request the document allows), and the
// answer always.
func (c *conformance) send(e *env, x *exchange, wantValid bool) *exchange {
	c.t.Helper()
	client := noRedirect(e)
	req := x.req.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.reqBody))
	req.ContentLength = int64(len(x.reqBody))
	res, err := client.Do(req)
	if err != nil {
		c.t.Fatalf("%s: %v", x.op, err)
	}
	x.body, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		c.t.Fatalf("%s: %v", x.op, err)
	}
	x.status, x.header = res.StatusCode, res.Header
	c.validate(x, wantValid)
	return x
}

// validate checks an exchange against the document.
func (c *conformance) validate(x *exchange, wantValid bool) {
	c.t.Helper()
	ctx := context.Background()
	req := x.req.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(x.reqBody))
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: x.params, Route: c.route(x.op),
		Options: &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: true}}
	what := fmt.Sprintf("%s %s", x.req.Method, x.req.URL.RequestURI())
	if wantValid {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			c.t.Errorf("%s (%s): the document refuses a request the server takes (%d): %v", what, x.op, x.status, err)
		}
	}
	in.Options = &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, AuthenticationFunc: authenticate}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: x.status, Header: x.header,
		Body: io.NopCloser(bytes.NewReader(x.body)), Options: in.Options}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		c.t.Errorf("%s (%s): the answer %d %s breaks the document: %v\nbody: %.600s", what, x.op, x.status, x.header.Get("Content-Type"), err, x.body)
	}
	c.checkFields(x)
	key := x.op.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exercised[key]++
	if x.status < 400 {
		c.succeeded[key]++
	}
}

// checkFields reports the fields of a JSON answer that its schema does
// not describe.
func (c *conformance) checkFields(x *exchange) {
	c.t.Helper()
	r := x.op.op.Responses.Status(x.status)
	if r == nil || r.Value == nil {
		return
	}
	mt := r.Value.Content.Get(x.header.Get("Content-Type"))
	if mt == nil || mt.Schema == nil || !strings.HasPrefix(x.header.Get("Content-Type"), "application/json") {
		return
	}
	var v any
	if json.Unmarshal(x.body, &v) != nil {
		return // the validation says so
	}
	if u := undocumented(mt.Schema, v, ""); len(u) > 0 {
		slices.Sort(u)
		u = slices.Compact(u)
		c.t.Errorf("%s %s (%s): the answer %d has fields the document does not describe: %v", x.req.Method, x.req.URL.RequestURI(), x.op, x.status, u)
	}
}

// exampleOf returns a parameter's example: its own, or its schema's.
func exampleOf(p *openapi3.Parameter) (any, bool) {
	if p.Example != nil {
		return p.Example, true
	}
	for _, ex := range p.Examples {
		if ex.Value != nil && ex.Value.Value != nil {
			return ex.Value.Value, true
		}
	}
	if p.Schema != nil && p.Schema.Value != nil && p.Schema.Value.Example != nil {
		return p.Schema.Value.Example, true
	}
	return nil, false
}

// text renders a parameter value.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return fmt.Sprint(v)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// request is a good request of an operation, built from the document's
// examples and the fixtures, with the optional query parameters in
// query (names and values).
func (c *conformance) request(e *env, fx fixtures, o docOperation, query url.Values) *exchange {
	c.t.Helper()
	path := o.path
	params := map[string]string{}
	q := url.Values{}
	joined := true
	for _, name := range fx.alone[o.String()] {
		if query.Has(name) {
			joined = false
		}
	}
	if joined {
		for k, vs := range fx.query[o.String()] {
			q[k] = vs
		}
	}
	header := http.Header{}
	for _, pr := range o.params() {
		p := pr.Value
		v, ok := exampleOf(p)
		if s, ok2 := fx.values[o.path][p.Name]; ok2 {
			v, ok = s, true
		}
		if !ok {
			if p.Required {
				c.t.Fatalf("%s: parameter %s has no example: give it one in openapi.json", o, p.Name)
			}
			continue
		}
		switch p.In {
		case "path":
			params[p.Name] = text(v)
			path = strings.Replace(path, "{"+p.Name+"}", url.PathEscape(text(v)), 1)
		case "query":
			if p.Required {
				if arr, ok := v.([]any); ok {
					for _, a := range arr {
						q.Add(p.Name, text(a))
					}
				} else {
					q.Set(p.Name, text(v))
				}
			}
		case "header":
			if p.Required {
				header.Set(p.Name, text(v))
			}
		}
	}
	for k, vs := range query {
		q[k] = vs
	}
	u := e.srv.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(o.method, u, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header = header
	var body []byte
	if rb := o.op.RequestBody; rb != nil && rb.Value != nil {
		for ct, mt := range rb.Value.Content {
			if b, ok := fx.body[o.String()]; ok {
				body = []byte(b)
			} else if mt.Example != nil {
				if ct == "application/x-www-form-urlencoded" {
					f := url.Values{}
					for k, v := range mt.Example.(map[string]any) {
						f.Set(k, text(v))
					}
					body = []byte(f.Encode())
				} else {
					body, _ = json.Marshal(mt.Example)
				}
			} else if rb.Value.Required {
				c.t.Fatalf("%s: its %s body has no example: give it one in openapi.json", o, ct)
			}
			if body != nil {
				req.Header.Set("Content-Type", ct)
			}
			break
		}
	}
	return &exchange{op: o, req: req, reqBody: body, params: params}
}

// withToken adds the bearer token to an exchange.
func withToken(x *exchange, token string) *exchange {
	x.req.Header.Set("Authorization", "Bearer "+token)
	return x
}

// seed fills e's store with what the examples of openapi.json name: job
// 1 (pending, queue mail), 2 and 3 (dead, queue default, kind email,
// failed with a timeout), the schedule "nightly", the limit
// "per-customer", for the workflows' routes workflow 1, and for the
// operations' routes an operation (its id in the fixtures).
func seed(t *testing.T, e *env, o docOperation) fixtures {
	t.Helper()
	ctx := t.Context()
	if err := e.client.SetLimits([]redrive.ConcurrencyLimit{{Name: "per-customer", Kind: "crm", Key: "payload.customer", Max: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(ctx, "email", map[string]string{"to": "ada@example.com"}, redrive.InQueue("mail")); err != nil {
		t.Fatal(err)
	}
	if dead := buryExamples(t, e, "default", 2); dead[0] != 2 {
		t.Fatalf("dead jobs %v, want 2 and 3", dead)
	}
	if strings.HasPrefix(o.path, "/v1/schedules") {
		stop := runPeriodicWorker(t, e.client, redrive.Periodic{Name: "nightly", Cron: "0 2 * * *", Kind: "reindex"})
		stop()
	}
	if strings.HasPrefix(o.path, "/v1/workflows/") {
		// Workflow 1: a waits, b after it.
		w := redrive.NewWorkflow("example").Add("a", redrive.Request{Kind: "email"}).Add("b", redrive.Request{Kind: "email"}, "a")
		if got, err := e.client.EnqueueWorkflow(ctx, w); err != nil || got.ID != 1 {
			t.Fatalf("the example workflow: %+v, %v", got, err)
		}
	}
	// A worker runs the operations the calls start (woken by the client
	// when one is started: it need not poll often).
	w := redrive.NewWorker(e.client, redrive.WorkerOptions{Queues: map[string]int{"operations-only": 1},
		PollInterval: 250 * time.Millisecond, Logger: quiet})
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(wctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	fx := fixtures{
		values: map[string]map[string]string{},
		body:   map[string]string{"POST /ui/login": url.Values{"token": {e.token}}.Encode()},
		query:  map[string]url.Values{"DELETE /v1/dlq": {"queue": {"default"}}},
		alone:  map[string][]string{"DELETE /v1/dlq": {"id"}},
	}
	// Cursors: the next page of a listing of one job.
	for _, path := range []string{"/v1/jobs", "/v1/dlq"} {
		var page struct{ Next string }
		e.want(e.do("GET", path+"?limit=1", ""), http.StatusOK, &page)
		fx.values[path] = map[string]string{"cursor": page.Next}
	}
	if !strings.HasPrefix(o.path, "/v1/operations") {
		return fx
	}
	// An operation that stays running: a redrive of dead jobs at the
	// smallest rate.
	more := buryExamples(t, e, "slow", 10)
	b, _ := json.Marshal(map[string]any{"ids": more, "rate": MinRate})
	r := e.do("POST", "/v1/dlq/redrive", string(b))
	var ob operationBody
	e.want(r, http.StatusAccepted, &ob)
	op := e.awaitProcessed(ob.Operation.ID, 1)
	for _, path := range []string{"/v1/operations/{id}", "/v1/operations/{id}/pause", "/v1/operations/{id}/resume", "/v1/operations/{id}/cancel"} {
		fx.values[path] = map[string]string{"id": op.ID}
	}
	fx.values["/v1/operations"] = map[string]string{"before": op.ID}
	return fx
}

// buryExamples makes n dead jobs in queue as the document's examples
// describe them: kind email, class transient, reason retries_exhausted,
// error "timeout: ...".
func buryExamples(t *testing.T, e *env, queue string, n int) []int64 {
	t.Helper()
	ctx := t.Context()
	var ids []int64
	for i := range n {
		if _, err := e.client.Enqueue(ctx, "email", map[string]any{"to": "ada@example.com", "n": i}, redrive.InQueue(queue)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	got, err := e.st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: n, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != n {
		t.Fatalf("fetch: %d, %v", len(got), err)
	}
	const msg = "timeout: no answer within 10s"
	outs := make([]store.Outcome, len(got))
	for i, j := range got {
		outs[i] = store.Outcome{JobID: j.ID, Queue: queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w", Kind: store.Bury, At: now,
			Class: failure.Transient, DeadReason: "retries_exhausted", Fingerprint: "transient:timeout", Error: msg,
			Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now, Class: "transient", Error: msg}}
		ids = append(ids, j.ID)
	}
	if _, err := e.st.Finish(ctx, outs); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// prepare puts the store in the state an operation's good call needs,
// for the few that need more than the fixtures.
func prepare(t *testing.T, e *env, fx fixtures, o docOperation) {
	t.Helper()
	switch o.String() {
	case "POST /v1/operations/{id}/resume":
		if _, err := e.client.PauseOperation(t.Context(), fx.values[o.path]["id"]); err != nil {
			t.Fatal(err)
		}
	case "POST /v1/schedules/{name}/resume":
		if _, err := e.client.PauseSchedule(t.Context(), "nightly"); err != nil {
			t.Fatal(err)
		}
	case "DELETE /v1/breakers/{name}":
		// A breaker an operator forced open: deletable at once.
		refill(t, e, o)
	case "POST /v1/worker/jobs/{id}/outcome":
		// The example's worker holds job 1, lease 1.
		var a LeaseAnswer
		e.want(e.do("POST", "/v1/worker/lease", `{"worker":"py-4121@box-a","queues":["mail"],"kinds":["email"]}`), http.StatusOK, &a)
		if len(a.Jobs) != 1 || a.Jobs[0].ID != 1 || a.Jobs[0].Lease != 1 {
			t.Fatalf("lease of job 1: %+v", a)
		}
	}
}

// refill puts back what a good call of o used up, for the next good call.
func refill(t *testing.T, e *env, o docOperation) {
	t.Helper()
	if o.String() == "DELETE /v1/breakers/{name}" {
		if _, err := e.st.SetBreaker(t.Context(), store.BreakerSet{Name: "api.example.com", State: store.BreakerOpen, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
}

// newConformanceEnv serves the API on a fresh seeded store, with the
// token given (none: "").
func newConformanceEnv(t *testing.T, token string, o docOperation) (*env, fixtures) {
	reg := breaker.NewRegistry(breaker.Config{})
	reg.Get("api.example.com")
	// Room for every operation the calls start, however slowly the
	// worker runs them (a 429 too_many_operations is not what is tested).
	st := openStore(t)
	e := newEnvOn(t, st, Options{Token: token, Breakers: reg, ExportDir: t.TempDir(), MaxBody: conformanceMaxBody, MaxOperations: 100,
		Workers: remoteWorkers(t, st, reg),
		Brokers: fixedBrokers{{Queue: "orders", DeadLetters: "broker"}},
		Kafka:   fixedTopics{{TopologyStats: kafka.TopologyStats{Topic: "orders"}, Brokers: []string{"127.0.0.1:9092"}}}})
	return e, seed(t, e, o)
}

// unknownParamRe reads the allowed parameters from the answer to an
// unknown one.
var unknownParamRe = regexp.MustCompile(`\(allowed: ([^)]*)\)`)

// TestOpenAPIConformance runs every documented operation against a real
// server, with and without a token, with good and bad input, and checks
// every request and answer against openapi.json.
func TestOpenAPIConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every operation on a server of its own")
	}
	doc := loadOpenAPI(t)
	c := &conformance{t: t, doc: doc, exercised: map[string]int{}, succeeded: map[string]int{}, mu: &sync.Mutex{}}
	// The answer to too large headers (the server takes half a second to
	// close the connection after it: once is enough).
	e := newEnv(t, Options{})
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("a", http.DefaultMaxHeaderBytes+8192))
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("too large headers: %d, want 431: %s", res.StatusCode, body)
	}
	c.tooLarge = &exchange{status: res.StatusCode, header: res.Header, body: body}
	ran := map[string]bool{}
	t.Run("operations", func(t *testing.T) {
		for _, o := range docOperations(doc) {
			t.Run(o.op.OperationID, func(t *testing.T) {
				t.Parallel()
				c.mu.Lock()
				ran[o.String()] = true
				c.mu.Unlock()
				c := *c
				c.t = t
				c.probe(o)
			})
		}
	})
	for _, o := range docOperations(doc) {
		if !ran[o.String()] {
			continue // not selected by -run
		}
		if c.exercised[o.String()] == 0 {
			t.Errorf("%s was not exercised", o)
		}
		if c.succeeded[o.String()] == 0 {
			t.Errorf("%s never succeeded: give it examples that succeed on the test's fixtures (seed)", o)
		}
	}
}

// probe runs an operation's calls: on a server with a token, without
// credentials, with a wrong token, with bad input, with the session
// cookie without X-Redrive-Request, and good; and on a server without a
// token, good and without credentials.
func (c *conformance) probe(o docOperation) {
	t := c.t
	e, fx := newConformanceEnv(t, conformanceToken, o)
	auth := o.needsAuth(c.doc)
	v1 := isV1(o.path)

	// Without credentials, then with a wrong token.
	x := c.send(e, c.request(e, fx, o, nil), !auth)
	if auth && x.status != http.StatusUnauthorized {
		t.Errorf("%s without a token: %d, want 401", o, x.status)
	}
	x = c.send(e, withToken(c.request(e, fx, o, nil), "wrong"), !auth)
	if auth && x.status != http.StatusUnauthorized {
		t.Errorf("%s with a wrong token: %d, want 401", o, x.status)
	}

	// An unknown query parameter.
	x = c.send(e, withToken(c.request(e, fx, o, url.Values{"nope": {"1"}}), e.token), false)
	if v1 {
		if x.status != http.StatusBadRequest {
			t.Errorf("%s with an unknown query parameter: %d, want 400", o, x.status)
		} else if m := unknownParamRe.FindSubmatch(x.body); m != nil {
			// The server's allowed parameters are the documented ones.
			var documented []string
			for _, p := range o.params() {
				if p.Value.In == "query" {
					documented = append(documented, p.Value.Name)
				}
			}
			allowed := strings.Split(string(m[1]), ", ")
			if len(m[1]) == 0 {
				allowed = nil
			}
			slices.Sort(allowed)
			slices.Sort(documented)
			if !slices.Equal(allowed, documented) {
				t.Errorf("%s: the server takes query parameters %v, the document %v", o, allowed, documented)
			}
		}
	}

	// Bad path parameters.
	for _, p := range o.params() {
		if p.Value.In != "path" {
			continue
		}
		x := withToken(c.request(e, fx, o, nil), e.token)
		bad := " name" // white space at an end breaks the name rule
		if s := p.Value.Schema; s != nil && s.Value != nil && s.Value.Type.Is("integer") {
			bad = "0"
		}
		x.req.URL.Path = strings.Replace(x.req.URL.Path, "/"+x.params[p.Value.Name], "/"+bad, 1)
		x.req.URL.RawPath = ""
		c.send(e, x, false)
		// A name that breaks the rule may still be taken where names
		// stored before the rule are (closing a breaker): only the answer's
		// shape is checked then.
		if bad == "0" && (x.status < 400 || x.status >= 500) {
			t.Errorf("%s with path parameter %s %q: %d, want a 4xx", o, p.Value.Name, bad, x.status)
		}
	}

	// Bad bodies.
	if rb := o.op.RequestBody; rb != nil && rb.Value != nil && rb.Value.Content.Get("application/json") != nil {
		for _, bad := range []struct {
			body   string
			header []string
			status int
		}{
			{`{"nope":1}`, nil, http.StatusBadRequest},
			{`{`, nil, http.StatusBadRequest},
			{`{}`, []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
			{`{}`, []string{"Content-Encoding", "gzip"}, http.StatusUnsupportedMediaType},
			{`{"n":"` + strings.Repeat("a", conformanceMaxBody) + `"}`, nil, http.StatusRequestEntityTooLarge},
		} {
			x := withToken(c.request(e, fx, o, nil), e.token)
			x.reqBody = []byte(bad.body)
			x.req.Header.Set("Content-Type", "application/json")
			for i := 0; i+1 < len(bad.header); i += 2 {
				x.req.Header.Set(bad.header[i], bad.header[i+1])
			}
			c.send(e, x, false)
			if x.status != bad.status {
				t.Errorf("%s with body %.40s %v: %d, want %d", o, bad.body, bad.header, x.status, bad.status)
			}
		}
	}

	// Headers too large for the server: the HTTP server answers before
	// any route, so the answer got once stands for every operation's.
	x = withToken(c.request(e, fx, o, nil), e.token)
	x.status, x.header, x.body = c.tooLarge.status, c.tooLarge.header, c.tooLarge.body
	c.validate(x, false)

	// With the dashboard's session cookie: a change needs the
	// X-Redrive-Request header too.
	var cookie *http.Cookie
	if auth && v1 {
		cookie = sessionOf(t, e.login(e.token))
		x := c.request(e, fx, o, nil)
		x.req.AddCookie(cookie)
		c.send(e, x, o.method == http.MethodGet)
		if o.method != http.MethodGet && x.status != http.StatusForbidden {
			t.Errorf("%s with the session cookie and without %s: %d, want 403", o, csrfHeader, x.status)
		}
	}

	// Good calls: one with the required parameters, then one for each
	// optional query parameter with an example.
	prepare(t, e, fx, o)
	for _, p := range o.params() {
		if p.Value.In != "query" || p.Value.Required {
			continue
		}
		v, ok := exampleOf(p.Value)
		if s, ok2 := fx.values[o.path][p.Value.Name]; ok2 {
			v, ok = s, true
		}
		if !ok {
			t.Errorf("%s: query parameter %s has no example", o, p.Value.Name)
			continue
		}
		q := url.Values{}
		if arr, ok := v.([]any); ok {
			for _, a := range arr {
				q.Add(p.Value.Name, text(a))
			}
		} else {
			q.Set(p.Value.Name, text(v))
		}
		x := c.send(e, withToken(c.request(e, fx, o, q), e.token), true)
		if x.status >= 400 {
			t.Errorf("%s with %s: %d %s", o, q.Encode(), x.status, x.body)
		}
		refill(t, e, o)
	}
	// The good call: a change is authorized by the dashboard's session
	// cookie with the header (the probes above got past authentication
	// with the bearer token), anything else by the bearer token.
	x = withToken(c.request(e, fx, o, nil), e.token)
	how := "with the bearer token"
	if cookie != nil && o.method != http.MethodGet {
		x = c.request(e, fx, o, nil)
		x.req.AddCookie(cookie)
		x.req.Header.Set(csrfHeader, "1")
		how = "with the session cookie and " + csrfHeader
	}
	x = c.send(e, x, true)
	if x.status >= 400 {
		t.Errorf("%s %s: %d %s", o, how, x.status, x.body)
	}
	checkAudited(t, e, o, LegacyTokenName)

	// On a server without a token, no credentials are needed.
	e0, fx0 := newConformanceEnv(t, "", o)
	prepare(t, e0, fx0, o)
	x = c.send(e0, c.request(e0, fx0, o, nil), true)
	if x.status >= 400 && o.String() != "POST /ui/login" {
		t.Errorf("%s without a token on a server without one: %d %s", o, x.status, x.body)
	}
	checkAudited(t, e0, o, anonymousActor)

	// A method the path does not document.
	for _, m := range []string{http.MethodPatch, http.MethodPut, http.MethodDelete, http.MethodPost} {
		if o.item.GetOperation(m) != nil || !strings.HasPrefix(o.path, "/v1/") {
			continue
		}
		x := withToken(c.request(e, fx, o, nil), e.token)
		x.req.Method = m
		res, err := noRedirect(e).Do(x.req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		c.checkComponent(o, "MethodNotAllowed", res, b)
		break
	}
}

// checkComponent checks an answer to a request no operation describes
// (a method a path does not have) against a response of the components.
func (c *conformance) checkComponent(o docOperation, name string, res *http.Response, body []byte) {
	c.t.Helper()
	ref := c.doc.Components.Responses[name]
	if ref == nil || ref.Value == nil {
		c.t.Errorf("openapi.json has no response %s in its components", name)
		return
	}
	mt := ref.Value.Content.Get(res.Header.Get("Content-Type"))
	if mt == nil {
		c.t.Errorf("%s: the %d answer's Content-Type %q is not the %s response's", o.path, res.StatusCode, res.Header.Get("Content-Type"), name)
		return
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		c.t.Errorf("%s: the %d answer is not JSON: %s", o.path, res.StatusCode, body)
		return
	}
	if err := mt.Schema.Value.VisitJSON(v); err != nil {
		c.t.Errorf("%s: the %d answer breaks the %s response: %v", o.path, res.StatusCode, name, err)
	}
}

// TestOpenAPIScenarios checks answers the generic calls of
// TestOpenAPIConformance do not reach (conflicts, missing things, the
// throttle of wrong tokens), each found in the document by kin-openapi's
// router, and validated.
func TestOpenAPIScenarios(t *testing.T) {
	doc := loadOpenAPI(t)
	// The router matches the document's paths on any host.
	rdoc := *doc
	rdoc.Servers = openapi3.Servers{{URL: "/"}}
	router, err := gorillamux.NewRouter(&rdoc)
	if err != nil {
		t.Fatal(err)
	}
	c := &conformance{t: t, doc: doc, exercised: map[string]int{}, succeeded: map[string]int{}, mu: &sync.Mutex{}}
	e, _ := newConformanceEnv(t, conformanceToken, docOperation{path: "/v1/jobs"})
	send := func(method, path, body string, status int, headers ...string) *exchange {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, e.srv.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatalf("%s %s: no documented route: %v", method, path, err)
		}
		req.Body = nil
		req.Header.Set("Authorization", "Bearer "+e.token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(headers); i += 2 {
			if headers[i] == "Host" {
				req.Host = headers[i+1]
				continue
			}
			req.Header.Set(headers[i], headers[i+1])
		}
		o := docOperation{method: route.Method, path: route.Path, item: route.PathItem, op: route.Operation}
		x := c.send(e, &exchange{op: o, req: req, reqBody: []byte(body), params: params}, status < 400)
		if x.status != status {
			t.Errorf("%s %s: %d, want %d: %s", method, path, x.status, status, x.body)
		}
		return x
	}
	send("GET", "/v1/jobs/999", "", http.StatusNotFound)
	send("POST", "/v1/jobs/2/cancel", "", http.StatusOK)
	send("POST", "/v1/jobs/2/cancel", "", http.StatusConflict)
	send("POST", "/v1/jobs/2/priority", `{"priority":1}`, http.StatusConflict)
	send("GET", "/v1/schedules/none", "", http.StatusNotFound)
	send("GET", "/v1/workflows/999", "", http.StatusNotFound)
	send("POST", "/v1/workflows/999/cancel", "", http.StatusNotFound)
	send("POST", "/v1/workflows", `{"jobs":[{"name":"a","kind":"email","after":["b"]},{"name":"b","kind":"email","after":["a"]}]}`, http.StatusBadRequest)
	wf := `{"idempotency_key":"wf-1","jobs":[{"name":"a","kind":"email"}]}`
	created := send("POST", "/v1/workflows", wf, http.StatusCreated)
	send("POST", "/v1/workflows", wf, http.StatusOK)
	// Adds: one that lands, a name taken, an unknown workflow, a
	// canceled one.
	var wfc struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(created.body, &wfc); err != nil || wfc.ID == 0 {
		t.Fatalf("the workflow created: %s, %v", created.body, err)
	}
	add := fmt.Sprintf("/v1/workflows/%d/jobs", wfc.ID)
	send("POST", add, `{"jobs":[{"name":"b","kind":"email","after":["a"]}]}`, http.StatusCreated)
	send("POST", add, `{"jobs":[{"name":"b","kind":"email"}]}`, http.StatusBadRequest)
	send("POST", "/v1/workflows/999/jobs", `{"jobs":[{"name":"b","kind":"email"}]}`, http.StatusNotFound)
	send("POST", fmt.Sprintf("/v1/workflows/%d/cancel", wfc.ID), "", http.StatusOK)
	send("POST", add, `{"jobs":[{"name":"c","kind":"email"}]}`, http.StatusConflict)
	// Deleting breakers: unknown, in use (tripped), forced.
	send("DELETE", "/v1/breakers/none", "", http.StatusNotFound)
	if _, err := e.st.ReportBreaker(t.Context(), store.BreakerReport{Name: "tripped", Process: "w1", Now: time.Now(), Failures: 1, Tripped: true,
		Rule: store.BreakerRule{Failures: 1, Window: time.Minute, BreakDuration: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	send("DELETE", "/v1/breakers/tripped", "", http.StatusConflict)
	send("DELETE", "/v1/breakers/tripped?force=maybe", "", http.StatusBadRequest)
	send("DELETE", "/v1/breakers/tripped?force=true", "", http.StatusNoContent)
	send("POST", "/v1/jobs", `{"kind":"email","idempotency_key":"k1"}`, http.StatusCreated)
	send("POST", "/v1/jobs", `{"kind":"email","idempotency_key":"k1"}`, http.StatusOK)
	send("POST", "/v1/jobs", `{"kind":"sms","idempotency_key":"k1"}`, http.StatusConflict)
	// A batch whose second key is held by another job: the first job is
	// enqueued, and both are listed with the error.
	x := send("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"email","idempotency_key":"k2"},{"kind":"sms","idempotency_key":"k1"}]}`, http.StatusConflict)
	var conflict struct {
		Error errorDetail       `json:"error"`
		Jobs  []json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(x.body, &conflict); err != nil || conflict.Error.Code != "idempotency_conflict" || len(conflict.Jobs) != 2 {
		t.Errorf("batch conflict: %s", x.body)
	}
	if r := x.op.op.Responses.Status(http.StatusConflict); r == nil || r.Value.Content.Get("application/json").Schema.Value.Properties["jobs"] == nil {
		t.Errorf("the document's 409 of %s has no jobs", x.op)
	}
	send("POST", "/v1/dlq/redrive", `{}`, http.StatusBadRequest)
	send("DELETE", "/v1/dlq", "", http.StatusBadRequest)
	send("GET", "/v1/jobs?state=dead,pending&state=running", "", http.StatusOK)
	send("GET", "/v1/jobs?since=2026-01-02T15:04:05Z&until=30m", "", http.StatusOK)
	send("GET", "/v1/jobs?since=yesterday", "", http.StatusBadRequest)
	send("POST", "/v1/jobs", `{"kind":"email"}`, http.StatusForbidden, "Sec-Fetch-Site", "cross-site")
	// A server that answers to given host names only.
	saved := e
	e = newEnv(t, Options{Token: conformanceToken, AllowedHosts: []string{"redrive.internal"}})
	send("GET", "/v1/stats", "", http.StatusMisdirectedRequest, "Host", "evil.example")
	send("POST", "/v1/jobs", `{"kind":"email"}`, http.StatusMisdirectedRequest, "Host", "evil.example")
	e = saved
	// Wrong tokens from one client: 401 five times, then 429.
	for i := range 6 {
		want := http.StatusUnauthorized
		if i == 5 {
			want = http.StatusTooManyRequests
		}
		send("GET", "/v1/stats", "", want, "Authorization", "Bearer wrong")
	}
}

// undocumented lists the fields of v that its schema does not describe:
// the keys of an object whose schema lists properties (and says nothing
// of others) that are not among them, at any depth, as dotted paths. A
// field added to an answer without its documentation is found so.
func undocumented(s *openapi3.SchemaRef, v any, at string) []string {
	if s == nil || s.Value == nil {
		return nil
	}
	sc := s.Value
	var out []string
	for _, alt := range [][]*openapi3.SchemaRef{sc.OneOf, sc.AnyOf} {
		if len(alt) == 0 {
			continue
		}
		// The alternative that documents the most (fewest undocumented).
		var best []string
		for i, a := range alt {
			if a.Value.VisitJSON(v) != nil {
				continue
			}
			u := undocumented(a, v, at)
			if i == 0 || best == nil || len(u) < len(best) {
				best = u
			}
		}
		out = append(out, best...)
	}
	switch v := v.(type) {
	case []any:
		for i, item := range v {
			out = append(out, undocumented(sc.Items, item, fmt.Sprintf("%s[%d]", at, i))...)
		}
	case map[string]any:
		props := map[string]*openapi3.SchemaRef{}
		for name, p := range sc.Properties {
			props[name] = p
		}
		for _, a := range sc.AllOf {
			if a.Value != nil {
				for name, p := range a.Value.Properties {
					props[name] = p
				}
			}
		}
		for k, fv := range v {
			field := strings.TrimPrefix(at+"."+k, ".")
			if p, ok := props[k]; ok {
				out = append(out, undocumented(p, fv, field)...)
			} else if ap := sc.AdditionalProperties.Schema; ap != nil {
				out = append(out, undocumented(ap, fv, field)...)
			} else if len(props) > 0 && sc.AdditionalProperties.Has == nil {
				out = append(out, field)
			}
		}
	}
	return out
}
