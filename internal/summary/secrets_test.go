package summary

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestOfHidesCredentials: a secret shows in no summary, wherever the
// payload puts it: the password of a URL of any scheme (a database, a
// broker, a cache), of a scheme-relative URL or of a URL inside text; a
// credential whatever the key holding it ("Bearer ...", "Basic ..."); a
// token that is a segment of a URL's path (a webhook's or a bot's); and
// the short key names of passwords.
func TestOfHidesCredentials(t *testing.T) {
	const secret = "S3CRETPW"
	for _, c := range []struct{ kind, payload, want string }{
		{"x", `{"dsn":"postgres://app:S3CRETPW@db.internal:5432/app"}`, `{"dsn":"postgres://db.internal:5432/app"}`},
		{"x", `{"broker":"amqp://guest:S3CRETPW@mq/"}`, `{"broker":"amqp://mq/"}`},
		{"x", `{"cache":"redis://:S3CRETPW@cache:6379/0?db=1"}`, `{"cache":"redis://cache:6379/0?***"}`},
		{"x", `{"u":"//app:S3CRETPW@host/x"}`, `{"u":"//host/x"}`},
		{"x", `{"note":"failed at https://app:S3CRETPW@host/x (timeout)"}`, `{"note":"failed at https://***@host/x (timeout)"}`},
		{"x", `{"Pass":"S3CRETPW","PASSPHRASE":"S3CRETPW","Pwd":1}`, `{"Pass":"***","PASSPHRASE":"***","Pwd":"***"}`},
		{"x", `{"h":[["Authorization","Bearer S3CRETPW"],["X","basic S3CRETPW"]]}`, `{"h":[["Authorization","***"],["X","***"]]}`},
		{"x", `{"u":"https://api.telegram.org/bot123456789:AAS3CRETPWAAS3CRETPW/sendMessage"}`, `{"u":"https://api.telegram.org/***/sendMessage"}`},
		{"http", `{"url":"https://hooks.slack.com/services/T0AB12CD3/B0AB12CD3/S3CRETPWx1y2z3S3CRETPW"}`,
			"GET https://hooks.slack.com/services/T0AB12CD3/B0AB12CD3/***"},
		{"http", `{"url":"//app:S3CRETPW@host/x"}`, `{"url":"//host/x"}`},
		// Kept: ordinary paths, ids, file names and e-mail addresses.
		{"download", `{"url":"https://example.com/files/IMG_20261128_123456.jpg"}`, "download https://example.com/files/IMG_20261128_123456.jpg"},
		{"download", `{"url":"https://example.com/redrive-v1.2.3-linux-amd64.tar.gz"}`, "download https://example.com/redrive-v1.2.3-linux-amd64.tar.gz"},
		{"http", `{"url":"https://example.com/v1/orders/42/items"}`, "GET https://example.com/v1/orders/42/items"},
		{"x", `{"to":"a@example.com","order":"550e8400-e29b-41d4-a716-446655440000"}`,
			`{"to":"a@example.com","order":"550e8400-e29b-41d4-a716-446655440000"}`},
	} {
		got := Of(c.kind, json.RawMessage(c.payload))
		if strings.Contains(got, secret) || got != c.want {
			t.Errorf("Of(%s, %s) = %s, want %s", c.kind, c.payload, got, c.want)
		}
	}
}
