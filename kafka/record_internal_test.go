package kafka

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzReadState: any headers are read or refused as undecodable; none
// panics, and what is read is in bounds.
func FuzzReadState(f *testing.F) {
	f.Add("2", "1700000000000", "[]", "t", "0", "5", "1")
	f.Add("x", "", "", "", "", "", "")
	f.Add("-1", "9999999999999999999", "[{\"kind\":\"retry\"}]", "t", "-3", "1", "")
	f.Fuzz(func(t *testing.T, attempt, due, history, origin, part, offset, redriven string) {
		r := &kgo.Record{Topic: "t", Partition: 1, Offset: 7}
		for _, h := range [][2]string{{HeaderAttempt, attempt}, {HeaderDue, due}, {HeaderHistory, history},
			{HeaderOriginTopic, origin}, {HeaderOriginPartition, part}, {HeaderOriginOffset, offset}, {HeaderRedriven, redriven}} {
			if h[1] != "" {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
			}
		}
		st, err := readState(r)
		if err != nil {
			if !errors.Is(err, errUndecodable) {
				t.Fatalf("error %v does not wrap errUndecodable", err)
			}
			return
		}
		if st.attempts < 0 || st.redriven < 0 || st.originPart < 0 || st.originOffset < 0 {
			t.Fatalf("out of bounds: %+v", st)
		}
		if st.key(r) == "" {
			t.Fatal("empty identity")
		}
	})
}

// TestStateKey: a job's idempotency key is topic/partition/offset of its
// record's first consumption, its origin when the headers carry one.
func TestStateKey(t *testing.T) {
	r := &kgo.Record{Topic: "orders", Partition: 7, Offset: 1 << 40}
	var st state
	if k := st.key(r); k != "orders/7/1099511627776" {
		t.Errorf("key %q", k)
	}
	st = state{hasOrigin: true, originTopic: "main.topic", originPart: 2147483647, originOffset: 0}
	if k := st.key(r); k != "main.topic/2147483647/0" {
		t.Errorf("origin key %q", k)
	}
}
