// Package strictjson decodes JSON that can mean only one thing.
//
// encoding/json matches object keys to struct fields case-insensitively,
// keeps the last of duplicate keys and turns a lone UTF-16 surrogate
// escape (\ud800) into U+FFFD: a gateway that reads the same bytes can see
// another value than the one decoded. Decode refuses all three, at any
// depth (in an object decoded into a map or kept as json.RawMessage too:
// a duplicate key is ambiguous wherever it is), as well as unknown fields,
// invalid UTF-8 and data after the value.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Problem is what makes a JSON text ambiguous.
type Problem int

// The problems Check finds.
const (
	// InvalidUTF8: the text is not valid UTF-8.
	InvalidUTF8 Problem = iota + 1
	// DuplicateKey: an object holds a key twice.
	DuplicateKey
	// UnknownKey: a key matches no field of the struct decoded into, or
	// matches one only when case is ignored.
	UnknownKey
	// LoneSurrogate: a string holds a \uXXXX escape of a UTF-16
	// surrogate that is not half of a pair.
	LoneSurrogate
)

// Error is an ambiguity Check found.
type Error struct {
	Problem Problem
	// Path is where: the dotted path of the key, as encoding/json names
	// fields ("jobs[2].payload.url"); the key itself for DuplicateKey and
	// UnknownKey, the string's place for LoneSurrogate; empty for the top
	// level.
	Path string
	// Want is, for UnknownKey, the field the key matches when case is
	// ignored ("" when none).
	Want string
}

// Error describes the problem.
func (e *Error) Error() string {
	switch e.Problem {
	case InvalidUTF8:
		return "the JSON text is not valid UTF-8"
	case DuplicateKey:
		return fmt.Sprintf("key %q is given more than once", e.Path)
	case UnknownKey:
		if e.Want != "" {
			return fmt.Sprintf("unknown field %q (field names are case-sensitive: %q)", e.Path, e.Want)
		}
		return fmt.Sprintf("unknown field %q", e.Path)
	case LoneSurrogate:
		where := ""
		if e.Path != "" {
			where = " in " + e.Path
		}
		return "a string" + where + ` holds a lone UTF-16 surrogate (\ud800-\udfff not in a pair), which is no character`
	}
	return "ambiguous JSON"
}

// Decode decodes data, exactly one JSON value with optional white space
// around it, into v (a pointer), refusing unknown fields and everything
// Check refuses. Errors of encoding/json (syntax, types) are returned as
// they are; an ambiguity is an *Error.
func Decode(data []byte, v any) error {
	if !utf8.Valid(data) {
		return &Error{Problem: InvalidUTF8}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return Check(data, reflect.TypeOf(v))
}

// Check reports the first ambiguity in data, which must be valid JSON
// (one value, as json.Valid accepts): invalid UTF-8, a duplicate key in
// any object, a lone surrogate in any string (keys included) and, where t
// (the type data is decoded into, nil for none) is a struct, a key that
// is not exactly one of its field names. Below a map, an interface, a
// json.RawMessage or another json.Unmarshaler, keys are free but still
// unique.
func Check(data []byte, t reflect.Type) error {
	if !utf8.Valid(data) {
		return &Error{Problem: InvalidUTF8}
	}
	if !json.Valid(data) {
		return errors.New("invalid JSON")
	}
	s := scanner{data: data}
	s.space()
	return s.value(t)
}

// scanner walks valid JSON.
type scanner struct {
	data []byte
	pos  int
	// at is where the scanner is: the keys and array indexes down to
	// the value at pos. The dotted path is built from it only for an
	// error: building it at every level would cost the square of the
	// depth (gigabytes for a 1 MiB body nested 10,000 deep).
	at []step
}

// step is one level of a path: an object's key, or an array's index
// when key is "" and index >= 0.
type step struct {
	key   string
	index int
}

// path is the dotted path of at, as encoding/json names fields
// ("jobs[2].payload.url").
func (s *scanner) path() string {
	var b strings.Builder
	for _, st := range s.at {
		if st.index >= 0 {
			b.WriteString("[" + strconv.Itoa(st.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(st.key)
	}
	return b.String()
}

func (s *scanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value checks the value at pos, decoded into t, found at s.at.
func (s *scanner) value(t reflect.Type) error {
	t = target(t)
	switch s.data[s.pos] {
	case '{':
		return s.object(t)
	case '[':
		return s.array(t)
	case '"':
		_, err := s.str()
		return err
	}
	for s.pos < len(s.data) { // a number, true, false or null
		switch s.data[s.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return nil
		}
		s.pos++
	}
	return nil
}

func (s *scanner) object(t reflect.Type) error {
	s.pos++ // {
	var fields map[string]field
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := map[string]bool{}
	for {
		s.space()
		if s.data[s.pos] == '}' {
			s.pos++
			return nil
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		s.at = append(s.at, step{key: key, index: -1})
		if seen[key] {
			return &Error{Problem: DuplicateKey, Path: s.path()}
		}
		seen[key] = true
		vt := elem
		if fields != nil {
			f, ok := fields[key]
			if !ok {
				return &Error{Problem: UnknownKey, Path: s.path(), Want: foldMatch(fields, key)}
			}
			vt = f.t
		}
		s.space()
		s.pos++ // :
		s.space()
		if err := s.value(vt); err != nil {
			return err
		}
		s.at = s.at[:len(s.at)-1]
		s.space()
		if s.data[s.pos] == ',' {
			s.pos++
		}
	}
}

func (s *scanner) array(t reflect.Type) error {
	s.pos++ // [
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	s.at = append(s.at, step{index: 0})
	for i := 0; ; i++ {
		s.space()
		if s.data[s.pos] == ']' {
			s.pos++
			s.at = s.at[:len(s.at)-1]
			return nil
		}
		s.at[len(s.at)-1].index = i
		if err := s.value(elem); err != nil {
			return err
		}
		s.space()
		if s.data[s.pos] == ',' {
			s.pos++
		}
	}
}

// str reads the string at pos and returns its value, refusing lone
// surrogates; s.at names it in errors.
func (s *scanner) str() (string, error) {
	start := s.pos
	s.pos++ // "
	escaped := false
	for {
		c := s.data[s.pos]
		switch c {
		case '"':
			s.pos++
			raw := s.data[start:s.pos]
			if !escaped {
				return string(raw[1 : len(raw)-1]), nil
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return "", err
			}
			return v, nil
		case '\\':
			escaped = true
			if s.data[s.pos+1] != 'u' {
				s.pos += 2
				continue
			}
			r := hex4(s.data[s.pos+2 : s.pos+6])
			s.pos += 6
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return "", &Error{Problem: LoneSurrogate, Path: s.path()}
			case r >= 0xD800 && r <= 0xDBFF:
				if s.pos+6 > len(s.data) || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
					return "", &Error{Problem: LoneSurrogate, Path: s.path()}
				}
				lo := hex4(s.data[s.pos+2 : s.pos+6])
				if lo < 0xDC00 || lo > 0xDFFF {
					return "", &Error{Problem: LoneSurrogate, Path: s.path()}
				}
				s.pos += 6
			}
		default:
			s.pos++
		}
	}
}

// hex4 reads four hex digits (valid JSON has them after \u).
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

// target is the type whose keys bind an object decoded into t: nil when
// none do (an interface, a json.Unmarshaler).
func target(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) {
			return nil
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Interface:
			return nil
		default:
			return t
		}
	}
	return nil
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// field is a struct field as encoding/json sees it.
type field struct {
	t     reflect.Type
	depth int
}

var fieldCache sync.Map // reflect.Type → map[string]field

// fieldsOf returns the JSON field names of struct type t, with embedded
// structs' fields promoted (the shallowest wins, as in encoding/json; a
// tie at one depth keeps the name, where encoding/json would drop it,
// which only makes Check accept what DisallowUnknownFields refuses).
func fieldsOf(t reflect.Type) map[string]field {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]field)
	}
	m := map[string]field{}
	addFields(m, t, 0, map[reflect.Type]bool{})
	fieldCache.Store(t, m)
	return m
}

func addFields(m map[string]field, t reflect.Type, depth int, visiting map[reflect.Type]bool) {
	if visiting[t] {
		return
	}
	visiting[t] = true
	defer delete(visiting, t)
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := sf.Type
		if sf.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				addFields(m, et, depth+1, visiting)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if f, ok := m[name]; ok && f.depth <= depth {
			continue
		}
		m[name] = field{t: ft, depth: depth}
	}
}

// foldMatch returns the field name that matches key when case is
// ignored, "" when none does.
func foldMatch(fields map[string]field, key string) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return name
		}
	}
	return ""
}
