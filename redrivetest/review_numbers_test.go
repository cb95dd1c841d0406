package redrivetest

import "testing"

// Numbers compare by their exact value, however many digits they have:
// a payload's 2^64+1 is not 2^64, and 0.1 is not 0.1 plus 10^-22.
func TestContainsComparesNumbersExactly(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{`{"n":18446744073709551617}`, `{"n":18446744073709551616}`, false},
		{`{"n":18446744073709551617}`, `{"n":18446744073709551617}`, true},
		{`{"n":9007199254740993}`, `{"n":9007199254740992}`, false},
		{`{"n":0.1}`, `{"n":0.1000000000000000000001}`, false},
		{`{"n":1e2}`, `{"n":100.0}`, true},
		{`{"n":-0}`, `{"n":0}`, true},
		{`[123456789012345678901234567890]`, `[123456789012345678901234567891]`, false},
	} {
		w, err := decode([]byte(tc.want))
		if err != nil {
			t.Fatal(err)
		}
		g, err := decode([]byte(tc.got))
		if err != nil {
			t.Fatal(err)
		}
		if contains(w, g) != tc.ok {
			t.Errorf("contains(%s, %s) = %v, want %v", tc.want, tc.got, !tc.ok, tc.ok)
		}
	}
}

// Through a store: what a job's payload holds is what its match is
// compared with, big integers and nested values included.
func TestRequireEnqueuedNumbersThroughTheStore(t *testing.T) {
	c := newClient(t)
	payload := []byte(`{"n":18446744073709551617,"f":1.0,"o":{"a":[1,{"b":null}]},"z":null}`)
	if _, err := c.Enqueue(t.Context(), "big", payload); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		match string
		ok    bool
	}{
		{`{"n":18446744073709551617}`, true},
		{`{"n":18446744073709551616}`, false},
		{`{"f":1}`, true},
		{`{"o":{"a":[1,{"b":null}]}}`, true},
		{`{"o":{"a":[1,{}]}}`, false},
		{`{"z":null}`, true},
		{`{"y":null}`, false},
	} {
		n := len(Enqueued(t, c, "big", &Match{Payload: []byte(tc.match)}))
		if (n == 1) != tc.ok {
			t.Errorf("match %s: %d jobs, want a match %v", tc.match, n, tc.ok)
		}
	}
}
