package config

import (
	"strings"

	"github.com/redrivehq/redrive/internal/redact"
)

// redactSettings are the names of secrets the API, the dashboard and the
// logs show masked (see docs/security.md).
var redactSettings = []setting{
	{name: "redact-headers", def: strings.Join(redact.DefaultHeaders, ","),
		help: `comma-separated patterns of the header and URL query parameter names whose values http and download payloads show as "•••" in the API, the dashboard and errors (case-insensitive, * for any run of characters, a pattern matches a whole name); "none" for none`,
		apply: func(c *Serve, v string) error {
			m, err := redact.Parse(v)
			if err != nil {
				return err
			}
			c.RedactHeaders = nonNil(m.Patterns())
			return nil
		}},
	{name: "redact-fields", def: strings.Join(redact.DefaultFields, ","),
		help: `comma-separated patterns of the JSON field names, at any depth, whose values payloads of other kinds show as "•••" in the API and the dashboard (as --redact-headers); "none" for none`,
		apply: func(c *Serve, v string) error {
			m, err := redact.Parse(v)
			if err != nil {
				return err
			}
			c.RedactFields = nonNil(m.Patterns())
			return nil
		}},
}

// nonNil returns list, or an empty list for nil: an empty list of
// patterns redacts nothing, where nil would mean the defaults.
func nonNil(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}
