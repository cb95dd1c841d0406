package redrive

import (
	"strings"

	"github.com/redrivehq/redrive/store"
)

// MaxNameLength bounds queue, kind and dependency names, in bytes.
const MaxNameLength = store.MaxNameLength

// CheckName reports, as an error wrapping ErrInvalid, why s cannot name
// a queue, a job kind, a dependency, a schedule or a limit (what says
// which); it is store.CheckName, the one name rule, which says what a
// name may hold.
func CheckName(what, s string) error { return store.CheckName(what, s) }

// clipName shortens a name quoted in an error, as the store's errors do.
func clipName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
