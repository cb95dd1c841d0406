package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// BenchmarkDeliveryJob is the per-delivery cost of reading a retried
// message (redrive's headers, as a consumer or the router reads them)
// into the job its attempt runs: readState and jobOf. Without trace
// headers it is the cost with no tracing; with them, the cost of the
// trace context carried.
func BenchmarkDeliveryJob(b *testing.B) {
	for _, tc := range []struct {
		name string
		h    amqp091.Table
	}{
		{"no-trace", amqp091.Table{}},
		{"traceparent", amqp091.Table{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tc.h[HeaderAttempt] = int64(2)
			tc.h[HeaderDue] = int64(1767225601000)
			tc.h[HeaderLastDelay] = int64(1000)
			d := &amqp091.Delivery{Headers: tc.h, Type: "scan", MessageId: "m1", Body: []byte(`{"n":1}`), Timestamp: time.Unix(1767225600, 0)}
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				st, err := readState(d.Headers, "q")
				if err != nil {
					b.Fatal(err)
				}
				if j := jobOf(d, "q", "scan", st, now); j.Attempt != 3 {
					b.Fatal(j.Attempt)
				}
			}
		})
	}
}
