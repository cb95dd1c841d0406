package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
)

// readExport decodes an NDJSON export, line by line.
func readExport(t *testing.T, body []byte) []ExportLine {
	t.Helper()
	var out []ExportLine
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var l ExportLine
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("line %d is not an export line: %v: %s", len(out)+1, err, sc.Bytes())
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExport(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	// More than one page of dead jobs in "big", a few elsewhere, and a
	// live job that must not appear.
	big := e.buryMany("big", "card declined", 2*exportPage+17)
	other := e.makeDead("other", "401 unauthorized", failure.NeedsAuth)
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","queue":"big"}`), 201, nil)

	r := e.do("GET", "/v1/dlq/export?queue=big", "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	if n := r.header.Get("X-Total-Count"); n != "417" {
		t.Errorf("X-Total-Count %q", n)
	}
	lines := readExport(t, r.body)
	if len(lines) != len(big) {
		t.Fatalf("%d lines, want %d", len(lines), len(big))
	}
	seen := map[int64]bool{}
	for _, l := range lines {
		j := l.Job
		if j == nil || j.State != redrive.Dead || j.Queue != "big" || seen[j.ID] || len(j.History) == 0 {
			t.Fatalf("line %+v", l)
		}
		seen[j.ID] = true
		// The same content as the folder export.
		we, wm := redrive.ExportedFiles(j)
		a, _ := json.Marshal(we)
		b, _ := json.Marshal(l.Error)
		if !bytes.Equal(a, b) {
			t.Fatalf("error %s, want %s", b, a)
		}
		a, _ = json.Marshal(wm)
		b, _ = json.Marshal(l.Metadata)
		if !bytes.Equal(a, b) {
			t.Fatalf("metadata %s, want %s", b, a)
		}
		if l.Error.Fingerprint != "permanent:card declined" || l.Metadata.Queue != "big" || l.Error.JobID != j.ID {
			t.Fatalf("line %+v", l)
		}
	}
	// The raw line holds the three keys, and the job its history.
	first, _, _ := strings.Cut(string(r.body), "\n")
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(first), &raw); err != nil || len(raw) != 3 || raw["job"]["history"] == nil ||
		raw["error"]["history"] == nil || raw["metadata"]["queue"] == nil {
		t.Fatalf("first line %s: %v", first, err)
	}

	// Filters: every filter of GET /v1/dlq applies.
	lines = readExport(t, e.do("GET", "/v1/dlq/export?class=needs_auth", "").body)
	if len(lines) != 1 || lines[0].Job.ID != other {
		t.Fatalf("class=needs_auth: %+v", lines)
	}
	lines = readExport(t, e.do("GET", "/v1/dlq/export?q=DECLINED&kind=dead-kind", "").body)
	if len(lines) != len(big) {
		t.Fatalf("q=DECLINED: %d lines", len(lines))
	}
	// Nothing matches: 200, no lines.
	r = e.do("GET", "/v1/dlq/export?queue=none", "")
	if r.status != 200 || len(r.body) != 0 || r.header.Get("X-Total-Count") != "0" {
		t.Fatalf("empty export: %d %q %v", r.status, r.body, r.header)
	}
	// Every dead job without a filter.
	if lines := readExport(t, e.do("GET", "/v1/dlq/export", "").body); len(lines) != len(big)+1 {
		t.Fatalf("export all: %d lines", len(lines))
	}
	// Auth.
	e.token = ""
	wantErr(t, e.do("GET", "/v1/dlq/export?queue=big", ""), 401, "unauthorized", "")
}
