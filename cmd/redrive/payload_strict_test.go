package main

import (
	"strings"
	"testing"

	"github.com/redrivehq/redrive/internal/sqlitetest"
)

// TestPayloadFlagStrict: --payload of enqueue and dlq redrive is held to
// the API's strictness in direct mode too: a duplicate key or a lone
// surrogate is refused, naming the key, and nothing is stored.
func TestPayloadFlagStrict(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "email", "--payload", `{"to":"a@example.com"}`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "email", "--payload", `{"to":"a@example.com","to":"b@example.com"}`}, `"to" is given more than once`},
		{[]string{"enqueue", "email", "--payload", `{"to":"\ud800"}`}, "lone UTF-16 surrogate"},
		{[]string{"dlq", "redrive", "1", "--payload", `{"a":{"b":1,"b":2}}`}, `"a.b" is given more than once`},
	} {
		_, _, err := runCLI(t, append([]string{"--db", db}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	if out := mustCLI(t, "--db", db, "--json", "jobs", "ls"); strings.Count(out, `"kind"`) != 1 {
		t.Errorf("jobs stored: %s", out)
	}
}
