// Package payload is how the broker transports keep raw bytes (a
// RabbitMQ message's body, a Kafka record's key, value and header values)
// byte-exact in a job's JSON payload, in the most readable encoding that
// fits them: compact JSON as it is, UTF-8 text as a JSON string, anything
// else as a base64 string.
package payload

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// The encodings of raw bytes in JSON.
const (
	// JSON: the bytes are compact JSON (no white space outside its
	// strings), kept as the JSON value itself, byte for byte.
	JSON = "json"
	// Text: the bytes are UTF-8 text, kept as a JSON string.
	Text = "text"
	// Base64: the bytes are binary, kept as a JSON string of their
	// standard base64.
	Base64 = "base64"
)

// Encode returns the encoding that fits b and b's JSON value in it.
func Encode(b []byte) (enc string, value json.RawMessage) {
	switch {
	case CompactJSON(b):
		return JSON, b
	case utf8.Valid(b):
		v, _ := json.Marshal(string(b))
		return Text, v
	default:
		v, _ := json.Marshal(base64.StdEncoding.EncodeToString(b))
		return Base64, v
	}
}

// CompactJSON reports whether b is JSON with no white space outside its
// strings: JSON that any encoder (encoding/json compacts what a
// MarshalJSON returns) leaves byte for byte as it is.
func CompactJSON(b []byte) bool {
	if len(b) == 0 || !json.Valid(b) {
		return false
	}
	var c bytes.Buffer
	if json.Compact(&c, b) != nil {
		return false
	}
	return bytes.Equal(c.Bytes(), b)
}

// Decode returns the bytes value holds in encoding enc ("" is Text);
// field and encField name the value's and the encoding's JSON fields in
// errors. An absent value (empty raw) is empty bytes, except in JSON,
// where it is an error.
func Decode(field, encField, enc string, value json.RawMessage) ([]byte, error) {
	switch enc {
	case JSON:
		if len(value) == 0 {
			return nil, fmt.Errorf("%q is required", field)
		}
		return []byte(value), nil
	case Text, Base64, "":
		var s string
		if len(value) > 0 {
			if err := json.Unmarshal(value, &s); err != nil {
				if enc == "" {
					enc = Text
				}
				return nil, fmt.Errorf("%q with %s %q must be a JSON string: %w", field, encField, enc, err)
			}
		}
		if enc != Base64 {
			return []byte(s), nil
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not base64: %w", field, err)
		}
		return raw, nil
	default:
		return nil, fmt.Errorf("%s %q: want json, text or base64", encField, enc)
	}
}
