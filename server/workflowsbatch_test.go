package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestWorkflowBatchAPI: POST /v1/workflows/batch enqueues its workflows
// in order (201), answers a workflow whose key is held, or taken earlier
// in the request, with the holder (existing), and keeps each request's
// fields.
func TestWorkflowBatchAPI(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	var first redrive.WorkflowInfo
	e.want(e.do("POST", "/v1/workflows", diamond), http.StatusCreated, &first)
	body := `{"workflows":[` + diamond + `,
		{"name":"pair","idempotency_key":"pair-1","jobs":[{"name":"a","kind":"email"},{"name":"b","kind":"email","after":["a"],"queue":"mail"}]},
		{"name":"pair again","idempotency_key":"pair-1","jobs":[{"name":"x","kind":"email"}]},
		{"jobs":[{"name":"solo","kind":"email","delay":"1h"}],"on_complete":{"kind":"notify"}}]}`
	var got WorkflowBatch
	e.want(e.do("POST", "/v1/workflows/batch", body), http.StatusCreated, &got)
	if len(got.Workflows) != 4 {
		t.Fatalf("%d workflows answered, want 4", len(got.Workflows))
	}
	ws := got.Workflows
	if ws[0].ID != first.ID || !ws[0].Existing {
		t.Errorf("the diamond, its key held: workflow %d existing %v, want %d existing", ws[0].ID, ws[0].Existing, first.ID)
	}
	if ws[1].Existing || ws[1].Name != "pair" || ws[1].Total != 2 || ws[1].Counts[store.Blocked] != 1 {
		t.Errorf("pair: %+v", ws[1])
	}
	if ws[2].ID != ws[1].ID || !ws[2].Existing || ws[2].Name != "pair" {
		t.Errorf("the second workflow of key pair-1: %+v, want workflow %d existing", ws[2], ws[1].ID)
	}
	if ws[3].Existing || ws[3].OnComplete == 0 || ws[3].Jobs[0].State != redrive.Scheduled {
		t.Errorf("solo: %+v", ws[3])
	}
	b, err := e.client.Get(t.Context(), ws[1].Jobs[1].JobID)
	if err != nil || b.Queue != "mail" || b.State != store.Blocked {
		t.Errorf("pair's job b: %+v, %v", b, err)
	}
	if n, w := jobCount(t, e), workflowCount(t, e); n != 5+2+2 || w != 3 {
		t.Errorf("%d jobs, %d workflows stored; want 9, 3", n, w)
	}
	// Enqueues are not audited, a batch of them neither.
	if entries, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{}, 0, 10); err != nil || len(entries) != 0 {
		t.Errorf("audit log: %v, %v; want no entry", entries, err)
	}
	e.want(e.do("POST", "/v1/workflows/batch", body, "Authorization", ""), http.StatusUnauthorized, nil)
}

// TestWorkflowBatchBadInput: a batch refused names the workflow at
// fault in its field (workflows[i]. and the field POST /v1/workflows
// would name) and its message, and stores nothing of any workflow.
func TestWorkflowBatchBadInput(t *testing.T) {
	e := newEnv(t, Options{})
	registerWorker(t, e.st, "serve", map[string]int{"default": 1}, "email")
	var held redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"email","idempotency_key":"held"}`), http.StatusCreated, &held)
	good := `{"jobs":[{"name":"a","kind":"email"}]}`
	batch := func(ws ...string) string { return `{"workflows":[` + strings.Join(ws, ",") + `]}` }
	many := make([]string, MaxWorkflowBatch+1)
	for i := range many {
		many[i] = good
	}
	var big []string
	for range 2 {
		jobs := make([]string, MaxWorkflowJobs/2+1)
		for i := range jobs {
			jobs[i] = fmt.Sprintf(`{"name":"j%d","kind":"email"}`, i)
		}
		big = append(big, `{"jobs":[`+strings.Join(jobs, ",")+`]}`)
	}
	for _, c := range []struct {
		name, body, header, code, field string
		status                          int
		says                            []string
	}{
		{"empty", `{}`, "", "invalid", "workflows", 400, []string{"at least one"}},
		{"none", `{"workflows":[]}`, "", "invalid", "workflows", 400, nil},
		{"too many", batch(many...), "", "invalid", "workflows", 400, []string{"1001 workflows", "1000"}},
		{"too many jobs", batch(big...), "", "invalid", "workflows[1].jobs", 400, []string{"10000 jobs"}},
		{"cycle", batch(good, `{"jobs":[{"name":"a","kind":"email","after":["b"]},{"name":"b","kind":"email","after":["a"]}]}`), "",
			"invalid", "workflows[1].jobs", 400, []string{"workflow 1:", "cycle"}},
		{"bad job", batch(good, good, `{"jobs":[{"name":"a","kind":"email","delay":"soon"}]}`), "", "invalid", "workflows[2].jobs[0].delay", 400, []string{"workflow 2:"}},
		{"bad workflow", batch(`{"on_dead":"maybe","jobs":[{"name":"a","kind":"email"}]}`), "", "invalid", "workflows[0].on_dead", 400, nil},
		{"unknown kind", batch(good, `{"jobs":[{"name":"a","kind":"email"}],"on_success":{"kind":"sms"}}`), "", "unknown_kind", "workflows[1].on_success.kind", 400, nil},
		{"key held", batch(good, `{"jobs":[{"name":"a","kind":"email"},{"name":"b","kind":"email","idempotency_key":"held"}]}`), "",
			"idempotency_conflict", "workflows[1].jobs[1].idempotency_key", 409, []string{"workflow 1:", fmt.Sprintf("held by job %d", held.ID)}},
		{"key twice in the request", batch(`{"jobs":[{"name":"a","kind":"email","idempotency_key":"k"}]}`, `{"jobs":[{"name":"b","kind":"email","idempotency_key":"k"}]}`), "",
			"invalid", "workflows[1].jobs", 400, []string{`"k"`}},
		{"header key", batch(good), "k", "invalid", "Idempotency-Key", 400, nil},
		{"unknown field", `{"workflows":[` + good + `],"x":1}`, "", "unknown_field", "x", 400, nil},
		{"not an array", `{"workflows":{}}`, "", "invalid_type", "workflows", 400, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var headers []string
			if c.header != "" {
				headers = []string{"Idempotency-Key", c.header}
			}
			r := e.do("POST", "/v1/workflows/batch", c.body, headers...)
			wantErr(t, r, c.status, c.code, c.field)
			var eb errorBody
			_ = json.Unmarshal(r.body, &eb)
			for _, s := range c.says {
				if !strings.Contains(eb.Error.Message, s) {
					t.Errorf("the message %q does not say %q", eb.Error.Message, s)
				}
			}
		})
	}
	if n, w := jobCount(t, e), workflowCount(t, e); n != 1 || w != 0 {
		t.Fatalf("refused batches stored %d jobs, %d workflows", n-1, w)
	}
}

// FuzzWorkflowBatchBody: no body panics the batch parser or answers
// 5xx; a refused one (4xx) stores nothing, and an accepted one stores
// exactly the jobs of the workflows it answers as created.
func FuzzWorkflowBatchBody(f *testing.F) {
	for _, s := range []string{
		`{"workflows":[` + diamond + `]}`,
		`{"workflows":[{"jobs":[{"name":"a","kind":"k"}]},{"idempotency_key":"x","jobs":[{"name":"a","kind":"k"}]},{"idempotency_key":"x","jobs":[{"name":"b","kind":"k"}]}]}`,
		`{"workflows":[{"jobs":[{"name":"a","kind":"k","after":["b"]},{"name":"b","kind":"k","after":["a"]}]}]}`,
		`{"workflows":[{"jobs":[{"name":"a","kind":"k","idempotency_key":"y"}]},{"jobs":[{"name":"a","kind":"k","idempotency_key":"y"}]}]}`,
		`{"workflows":[null]}`,
		`{"workflows":null}`,
		`{"workflows":[{}]}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	st := openStore(f)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	h := New(Options{Client: c, Logger: quiet, MaxBody: 64 << 10})
	f.Cleanup(func() { _ = h.Close() })
	counts := func(t *testing.T) (int64, int64) {
		jobs, err := st.Count(context.Background(), store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		ws, _, err := st.ListWorkflows(context.Background(), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		last := int64(0)
		if len(ws) > 0 {
			last = ws[0].ID
		}
		return jobs, last
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		jobs, last := counts(t)
		rec := fuzzPost(t, h, "/v1/workflows/batch", body)
		jobsAfter, lastAfter := counts(t)
		switch {
		case rec.Code >= 500:
			t.Fatalf("body %q answered %d: %s", body, rec.Code, rec.Body)
		case rec.Code >= 400:
			if jobsAfter != jobs || lastAfter != last {
				t.Fatalf("refused (%d) body %q stored %d jobs, workflow %d", rec.Code, body, jobsAfter-jobs, lastAfter)
			}
		case rec.Code == http.StatusCreated:
			var out WorkflowBatch
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			created := map[int64]bool{}
			stored := int64(0)
			for _, w := range out.Workflows {
				if w.Existing || created[w.ID] {
					continue
				}
				created[w.ID] = true
				stored += w.Total
				for _, id := range []int64{w.OnSuccess, w.OnComplete, w.OnDeath} {
					if id != 0 {
						stored++
					}
				}
			}
			if jobsAfter-jobs != stored {
				t.Fatalf("body %q answered %d workflows created with %d jobs; %d stored", body, len(created), stored, jobsAfter-jobs)
			}
		default:
			t.Fatalf("body %q answered %d", body, rec.Code)
		}
	})
}
