package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestWriteQueuesFair: queues ls says which queues are fair, on what key
// and with which weights.
func TestWriteQueuesFair(t *testing.T) {
	var b bytes.Buffer
	qs := []redrive.Queue{
		{Name: "imports", Jobs: map[redrive.State]int64{}, Fair: &redrive.FairShare{Queue: "imports", Key: "payload.tenant", Weights: map[string]int{"b": 2, "a": 3}}},
		{Name: "mail", Jobs: map[redrive.State]int64{}, Fair: &redrive.FairShare{Queue: "mail", Key: "dependency"}},
		{Name: "plain", Jobs: map[redrive.State]int64{}},
	}
	if err := writeQueues(&b, qs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"fair: imports starts its jobs by round robin over payload.tenant (weights a=3, b=2; others 1)\n",
		"fair: mail starts its jobs by round robin over dependency\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("queues ls output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "fair: plain") {
		t.Errorf("queues ls calls plain fair:\n%s", out)
	}
}
