package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
)

// FuzzWorkerBodies: the worker protocol's bodies never panic the
// parsers; a body they accept holds only valid outcomes (each passes the
// engine's own check), and a body they refuse is a 400 naming a field.
func FuzzWorkerBodies(f *testing.F) {
	for _, s := range []string{
		`{"worker":"py-1@box","outcomes":[{"id":1,"lease":1,"outcome":"complete","result":{"a":1}}]}`,
		`{"worker":"py-1@box","outcomes":[{"id":1,"lease":1,"outcome":"fail","class":"rate_limited","error":"429","retry_after":"2s","dependency":"crm"}]}`,
		`{"worker":"py-1@box","outcomes":[{"id":1,"lease":1,"outcome":"snooze","delay":"30s"},{"id":2,"lease":3,"outcome":"release"}]}`,
		`{"worker":"py-1@box","outcomes":[{"id":1,"lease":1,"outcome":"fail","class":"flaky","error":"x"}]}`,
		`{"worker":"py-1@box","outcomes":[{"id":1,"lease":1,"outcome":"snooze","delay":"-1s"}]}`,
		`{"worker":"py-1@box","queues":["q"],"kinds":["k"],"dependencies":{"k":"ocr"},"max":10,"wait":"30s"}`,
		`{"worker":"py 1","queues":["q/x"],"kinds":[""],"max":-1,"wait":"1y"}`,
		`{"worker":"py-1@box","queues":["q"],"kinds":["k"],"max":2,"request":"a1b2","resend":true,"held":[{"id":1,"lease":2}]}`,
		`{"worker":"py-1@box","queues":["q"],"kinds":["k"],"request":"a b","held":[{"id":0,"lease":-1}]}`,
		`{"worker":"py-1@box","outcomes":[{"id":1,"lease":1,"outcome":"complete","result":"` + strings.Repeat("a", 100) + `"}]}`,
	} {
		f.Add([]byte(s))
	}
	a := &api{maxBody: DefaultMaxBody}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ob OutcomesBody
		if err := a.decodeStrict(raw, &ob); err == nil {
			outs, err := ParseOutcomes(&ob)
			checkParsed(t, err)
			for i := range outs {
				if err := outs[i].Check(); err != nil {
					t.Fatalf("accepted outcome %d fails the engine's check: %v", i, err)
				}
				if outs[i].ID <= 0 || outs[i].Lease <= 0 {
					t.Fatalf("accepted outcome %d without a pair: %+v", i, outs[i])
				}
			}
			if err == nil && (len(outs) == 0 || len(outs) > redrive.MaxRemoteLease) {
				t.Fatalf("accepted %d outcomes", len(outs))
			}
		}
		var lb LeaseBody
		if err := a.decodeStrict(raw, &lb); err == nil {
			q, err := ParseLease(&lb)
			checkParsed(t, err)
			if err == nil {
				if redrive.CheckRemoteWorker(q.Worker) != nil || q.Max < 1 || q.Max > redrive.MaxRemoteLease || q.Wait < 0 ||
					q.Wait > redrive.MaxRemoteWait || len(q.Queues) == 0 || len(q.Kinds) == 0 {
					t.Fatalf("accepted a bad lease: %+v", q)
				}
				if q.Request != "" && redrive.CheckLeaseRequestID(q.Request) != nil || q.Resend && q.Request == "" ||
					len(q.Held) > 0 && !q.Resend || len(q.Held) > redrive.MaxRemoteHeldList {
					t.Fatalf("accepted a bad lease sent again: %+v", q)
				}
				for _, l := range q.Held {
					if l.JobID <= 0 || l.Token <= 0 {
						t.Fatalf("accepted a held lease without a pair: %+v", l)
					}
				}
			}
		}
	})
}

// checkParsed fails unless err is nil or a 400 naming its field.
func checkParsed(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != 400 || ae.field == "" || ae.msg == "" {
		t.Fatalf("refusal is not a 400 naming its field: %#v", err)
	}
}
