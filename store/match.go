package store

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ParsePayloadMatch parses a payload match as operators write it,
// payload.FIELD=VALUE: FIELD a dotted path of object keys (see
// PayloadPath), VALUE a JSON string, number, boolean or null, or else
// taken as a string (payload.status=failed). It returns the
// Filter.PayloadField and PayloadValue it means; its error wraps
// ErrInvalid and words the problem for the operator.
func ParsePayloadMatch(s string) (field string, value json.RawMessage, err error) {
	rest, ok := strings.CutPrefix(s, "payload.")
	if !ok {
		return "", nil, fmt.Errorf("%w: want payload.FIELD=VALUE (e.g. payload.customer_id=42), got %q", ErrInvalid, clipName(s))
	}
	field, v, ok := strings.Cut(rest, "=")
	if !ok {
		return "", nil, fmt.Errorf("%w: %q has no =VALUE (e.g. payload.customer_id=42)", ErrInvalid, clipName(s))
	}
	if _, err := PayloadPath(field); err != nil {
		return "", nil, fmt.Errorf("%w: field %q: each key is a letter or _ then letters, digits, _ or - (at most 8 keys)", ErrInvalid, clipName(field))
	}
	raw := json.RawMessage(v)
	if CheckPayloadMatch(Filter{PayloadField: field, PayloadValue: raw}) != nil {
		// Not a JSON scalar: the text itself, as a JSON string.
		b, err := json.Marshal(v)
		if err != nil {
			return "", nil, fmt.Errorf("%w: value %q: %w", ErrInvalid, clipName(v), err)
		}
		raw = b
	}
	return field, raw, nil
}
