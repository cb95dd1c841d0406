package server

import (
	"testing"
)

// FuzzReplayBody posts arbitrary bodies to POST /v1/replay: never a 5xx,
// never a hang, a 4xx with the error shape, or 202 (an operation
// started) or 429 (too many unfinished).
func FuzzReplayBody(f *testing.F) {
	for _, s := range []string{
		`{"all":true}`,
		`{"filter":{"queue":"q","states":["completed","dead"]},"batch":50,"rate":10,"note":"reindex"}`,
		`{"filter":{"payload_field":"customer_id","payload_value":42}}`,
		`{"filter":{"payload_field":"customer.id","payload_value":"42"}}`,
		`{"filter":{"payload_field":"a","payload_value":{"x":1}}}`,
		`{"filter":{"payload_field":"a b","payload_value":1}}`,
		`{"filter":{"payload_field":"a"}}`,
		`{"filter":{"payload_value":null}}`,
		`{"filter":{"states":["gone"]}}`,
		`{"filter":{"since":"7d","until":"1h"}}`,
		`{"all":true,"batch":-1}`,
		`{"all":true,"batch":1001}`,
		`{"all":true,"rate":1e400}`,
		`{"all":"yes"}`,
		`{`,
		``,
	} {
		f.Add([]byte(s))
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzPost(t, h, "/v1/replay", body)
	})
}

// FuzzExportBody posts arbitrary bodies to POST /v1/dlq/export on a
// server without an export folder: every answer is a clean 4xx.
func FuzzExportBody(f *testing.F) {
	for _, s := range []string{
		`{"all":true,"dir":"out"}`,
		`{"filter":{"queue":"q"},"dir":"nightly/out","batch":10}`,
		`{"all":true,"dir":"../etc"}`,
		`{"all":true,"dir":"/abs"}`,
		`{"dir":""}`,
		`{`,
		``,
	} {
		f.Add([]byte(s))
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzPost(t, h, "/v1/dlq/export", body)
	})
}
