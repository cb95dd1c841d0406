package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/apiclient"
)

// batchBody is a POST /v1/jobs/batch body of n jobs, each with a small
// object payload.
func batchBody(n int) []byte {
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = fmt.Sprintf(`{"kind":"http","queue":"webhooks","idempotency_key":"k-%d","payload":{"url":"https://example.com/hook/%d","method":"POST","headers":{"X-A":"1","x-a":"2"},"body":"hello"}}`, i, i)
	}
	return []byte(`{"jobs":[` + strings.Join(jobs, ",") + `]}`)
}

// BenchmarkBatch compares the strict decoding of a 1,000-job batch with
// what the server did before it (encoding/json with unknown fields
// refused).
func BenchmarkBatch(b *testing.B) {
	body := batchBody(1000)
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req apiclient.BatchRequest
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req apiclient.BatchRequest
			if err := Decode(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
