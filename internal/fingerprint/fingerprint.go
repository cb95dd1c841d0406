// Package fingerprint groups errors by cause: it normalises an error
// message (numbers, ids, addresses and quoted values vary between jobs that
// failed for the same reason) and hashes it with the failure class, so the
// DLQ can show an operator causes rather than rows.
package fingerprint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// maxInput bounds how much of a message is normalised.
const maxInput = 4096

// Normalize returns the message with the parts that vary between
// occurrences of one cause replaced: quoted strings by "…", runs of hex
// digits of length 8 or more (ids, hashes, UUIDs) by "*", and numbers by
// "#". Letters are lowered and white space folded.
func Normalize(msg string) string {
	if len(msg) > maxInput {
		msg = msg[:maxInput]
	}
	var b strings.Builder
	b.Grow(len(msg))
	space := false
	for i := 0; i < len(msg); {
		c := msg[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if j := strings.IndexByte(msg[i+1:], c); j >= 0 {
				b.WriteString("\"…\"")
				i += j + 2
				space = false
				continue
			}
		case isHex(c):
			j := i
			digits := false
			for j < len(msg) && (isHex(msg[j]) || msg[j] == '-') {
				if '0' <= msg[j] && msg[j] <= '9' {
					digits = true
				}
				j++
			}
			if j-i >= 8 && digits && (i == 0 || !isWord(msg[i-1])) && (j == len(msg) || !isWord(msg[j])) {
				b.WriteByte('*')
				i = j
				space = false
				continue
			}
		}
		switch {
		case '0' <= c && c <= '9':
			for i < len(msg) && '0' <= msg[i] && msg[i] <= '9' {
				i++
			}
			b.WriteByte('#')
			space = false
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if !space {
				b.WriteByte(' ')
			}
			space = true
			i++
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b.WriteByte(c)
		space = false
		i++
	}
	return strings.TrimSpace(b.String())
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isWord(c byte) bool {
	return isHex(c) || 'g' <= c && c <= 'z' || 'G' <= c && c <= 'Z' || c == '_'
}

// Of returns the fingerprint of a failure: 16 hex digits of the SHA-256 of
// the job's queue and kind, the class, the reason and the normalised
// message, each length-prefixed. One cause in two queues or kinds is two groups: a redrive or a
// purge of a group never crosses queues.
func Of(queue, kind, class, reason, msg string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range []string{queue, kind, class, reason, Normalize(msg)} {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
