package redrive

import "github.com/redrivehq/redrive/store"

// MaxNameLength bounds queue, kind and dependency names, in bytes.
const MaxNameLength = store.MaxNameLength

// CheckName reports, as an error wrapping ErrInvalid, why s cannot name
// a queue, a job kind, a dependency, a schedule or a limit (what says
// which); it is store.CheckName, the one name rule, which says what a
// name may hold.
func CheckName(what, s string) error { return store.CheckName(what, s) }
