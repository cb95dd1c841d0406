package server

import (
	"context"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// runPeriodicWorker runs a worker declaring ps on e's store until the test
// ends or the function it returns is called, and waits until the store
// lists them.
func runPeriodicWorker(t *testing.T, c *redrive.Client, ps ...redrive.Periodic) (stop func()) {
	t.Helper()
	w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: quiet, Periodic: ps, Queues: map[string]int{"idle": 1}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	testwait.Watch(t, fmt.Sprintf("the worker to declare its %d schedules", len(ps)), 10*time.Second, func() (bool, string) {
		list, err := c.Schedules(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(list) == len(ps), fmt.Sprintf("%d declared", len(list))
	})
	return stop
}

func TestSchedules(t *testing.T) {
	e := newEnv(t, Options{})
	var empty ScheduleList
	e.want(e.do("GET", "/v1/schedules", ""), 200, &empty)
	if empty.Schedules == nil || len(empty.Schedules) != 0 {
		t.Errorf("schedules of an empty store: %+v", empty)
	}
	stop := runPeriodicWorker(t, e.client,
		redrive.Periodic{Name: "nightly reindex", Cron: "0 2 * * *", TimeZone: "America/New_York", Kind: "reindex",
			Payload: map[string]int{"batch": 100}, Missed: redrive.MissedRunOnce, Options: []redrive.Option{redrive.InQueue("index")}},
		redrive.Periodic{Name: "hourly", Every: time.Hour, Kind: "sweep"})

	var list ScheduleList
	e.want(e.do("GET", "/v1/schedules", ""), 200, &list)
	if len(list.Schedules) != 2 || list.Schedules[0].Name != "hourly" || list.Schedules[1].Name != "nightly reindex" {
		t.Fatalf("schedules: %+v", list)
	}
	n := list.Schedules[1]
	ny, _ := time.LoadLocation("America/New_York")
	if n.Cron != "0 2 * * *" || n.TimeZone != "America/New_York" || n.Kind != "reindex" || n.Queue != "index" ||
		n.Missed != redrive.MissedRunOnce || n.Paused || n.NextRun.In(ny).Format("15:04") != "02:00" || !n.LastRun.IsZero() {
		t.Errorf("nightly: %+v", n)
	}
	h := list.Schedules[0]
	if h.Every != "1h0m0s" || h.Missed != redrive.MissedSkip || !h.NextRun.Equal(time.Now().Truncate(time.Hour).Add(time.Hour)) {
		t.Errorf("hourly: %+v", h)
	}

	path := "/v1/schedules/" + url.PathEscape("nightly reindex")
	var one ScheduleBody
	e.want(e.do("GET", path, ""), 200, &one)
	if one.Schedule.Name != "nightly reindex" {
		t.Errorf("get: %+v", one)
	}
	one = ScheduleBody{} // fields absent from the answer must read as zero
	e.want(e.do("POST", path+"/pause", ""), 200, &one)
	if !one.Schedule.Paused || one.Schedule.PausedAt.IsZero() || !one.Schedule.NextRun.IsZero() {
		t.Errorf("paused: %+v", one.Schedule)
	}
	one = ScheduleBody{}
	e.want(e.do("POST", path+"/resume", ""), 200, &one)
	if one.Schedule.Paused || one.Schedule.NextRun.IsZero() {
		t.Errorf("resumed: %+v", one.Schedule)
	}
	var job redrive.Job
	e.want(e.do("POST", path+"/trigger", ""), 201, &job)
	if job.Kind != "reindex" || job.Queue != "index" || !strings.HasPrefix(job.IdempotencyKey, "periodic:nightly reindex:trigger:") ||
		job.State != redrive.Pending || string(job.Payload) != `{"batch":100}` {
		t.Errorf("triggered: %+v", job)
	}

	// A running worker declares it: deleting it is refused, naming the
	// worker (deleted, it would be declared again within seconds).
	r := e.do("DELETE", "/v1/schedules/hourly", "")
	wantErr(t, r, 409, "conflict", "name")
	if !strings.Contains(string(r.body), `is declared by the running worker`) {
		t.Errorf("delete of a declared schedule: %s", r.body)
	}
	if _, err := e.client.Schedule(t.Context(), "hourly"); err != nil {
		t.Fatalf("the refused delete deleted it: %v", err)
	}
	stop()
	if r := e.do("DELETE", "/v1/schedules/hourly", ""); r.status != 204 || len(r.body) != 0 {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("DELETE", "/v1/schedules/hourly", ""), 404, "not_found", "name")
	wantErr(t, e.do("GET", "/v1/schedules/nope", ""), 404, "not_found", "name")
	wantErr(t, e.do("POST", "/v1/schedules/nope/pause", ""), 404, "not_found", "name")
	wantErr(t, e.do("POST", "/v1/schedules/nope/trigger", ""), 404, "not_found", "name")
	wantErr(t, e.do("POST", "/v1/schedules/%20x/resume", ""), 400, "invalid", "name")
	wantErr(t, e.do("POST", "/v1/schedules/a%2Fb/pause", ""), 400, "invalid", "name")
	wantErr(t, e.do("POST", "/v1/schedules/hourly/pause", `{"why":"x"}`), 400, "unknown_field", "why")
	wantErr(t, e.do("GET", "/v1/schedules?x=1", ""), 400, "invalid", "x")
}

// FuzzScheduleRoutes: any name on the schedules' routes is answered
// without a 5xx, and a 4xx carries the error shape.
func FuzzScheduleRoutes(f *testing.F) {
	for _, s := range []string{"tick", "nightly reindex", "", " x", "a/b", "a%2Fb", "\x00", "\xff", strings.Repeat("n", 300), "é", "..", "%"} {
		f.Add(s, "pause")
		f.Add(s, "trigger")
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, name, action string) {
		for _, p := range []string{"/v1/schedules/" + url.PathEscape(name), "/v1/schedules/" + url.PathEscape(name) + "/" + url.PathEscape(action)} {
			for _, m := range []string{"GET", "POST"} {
				req := httptest.NewRequest(m, "/", nil)
				req.URL.Path, req.URL.RawPath = "", ""
				u, err := url.Parse(p)
				if err != nil {
					continue
				}
				req.URL = u
				req.RequestURI = u.RequestURI()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				switch {
				case rec.Code >= 500:
					t.Fatalf("%s %s: status %d: %s", m, p, rec.Code, rec.Body.Bytes())
				case rec.Code >= 400 && rec.Code != http.StatusMethodNotAllowed:
					checkErrorShape(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
				}
			}
		}
	})
}
