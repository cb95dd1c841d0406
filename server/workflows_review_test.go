package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode"

	"github.com/redrivehq/redrive"
)

// TestWorkflowUnknownAfterNamed: an after naming no job is refused
// naming the field of the job at fault and the reference, escaped: a
// job's name may hold " -> " (the add's field was then looked up by the
// part before it, and fell back to jobs), and an unknown name is
// checked by nothing, so it may carry control characters, which the
// message (printed by the CLI) must not pass on.
func TestWorkflowUnknownAfterNamed(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	var w redrive.WorkflowInfo
	e.want(e.do("POST", "/v1/workflows", `{"jobs":[{"name":"A","kind":"email"}]}`), http.StatusCreated, &w)
	message := func(r resp) string {
		var eb errorBody
		if err := json.Unmarshal(r.body, &eb); err != nil {
			t.Fatalf("error body %s: %v", r.body, err)
		}
		return eb.Error.Message
	}
	for _, c := range []struct {
		path, body, field, ref string
	}{
		{fmt.Sprintf("/v1/workflows/%d/jobs", w.ID), `{"jobs":[{"name":"B","kind":"email"},{"name":"p -> q","kind":"email","after":["B","X"]}]}`,
			"jobs[1].after", `"p -> q" -> X`},
		{fmt.Sprintf("/v1/workflows/%d/jobs", w.ID), `{"jobs":[{"name":"B","kind":"email","after":["x\u001b[2J\nforged"]}]}`,
			"jobs[0].after", `B -> "x\x1b[2J\nforged"`},
		{"/v1/workflows", `{"jobs":[{"name":"B","kind":"email","after":["x\u001b[2J\nforged"]}]}`,
			"jobs[0].after", `B -> "x\x1b[2J\nforged"`},
	} {
		r := e.do("POST", c.path, c.body)
		wantErr(t, r, http.StatusBadRequest, "invalid", c.field)
		if msg := message(r); strings.ContainsFunc(msg, unicode.IsControl) || !strings.Contains(msg, c.ref) {
			t.Errorf("POST %s %s: message %q holds a control character or does not name %q", c.path, c.body, msg, c.ref)
		}
	}
}
