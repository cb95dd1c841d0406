package httpreq

import (
	"fmt"
	"net/url"
	"sort"

	"github.com/redrivehq/redrive/internal/redact"
)

// Masked returns the field of a request payload whose URL user name or
// password, query parameter or header value is the redaction mask
// (redact.Mask) where a secret belongs, and an error saying so; "" and nil when none is. Such
// a payload was copied from a masked read (the API, the dashboard): sent
// as it is, the target would get "•••" for a credential. An admin reads
// the payload whole with reveal=true.
func Masked(u *url.URL, headers map[string]string) (field string, err error) {
	const hint = "the redaction mask " + redact.Mask + " stands where a secret belongs: the payload was copied from a masked read; give the value (an admin reads the payload whole with reveal=true)"
	if u.User != nil && u.User.Username() == redact.Mask {
		return "payload.url", fmt.Errorf("the URL's user name: %s", hint)
	}
	if pw, ok := u.User.Password(); ok && pw == redact.Mask {
		return "payload.url", fmt.Errorf("the URL's password: %s", hint)
	}
	q := u.Query()
	for _, k := range sortedKeys(q) {
		for _, v := range q[k] {
			if v == redact.Mask {
				return "payload.url", fmt.Errorf("query parameter %q: %s", k, hint)
			}
		}
	}
	names := make([]string, 0, len(headers))
	for k := range headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if headers[k] == redact.Mask {
			return "payload.headers", fmt.Errorf("header %q: %s", k, hint)
		}
	}
	return "", nil
}

func sortedKeys(q url.Values) []string {
	ks := make([]string, 0, len(q))
	for k := range q {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
