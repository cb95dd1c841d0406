// Package seal encrypts job payloads at rest with AES-256-GCM: a Keyring
// of named keys read from a key file or the environment, and the envelope
// a sealed payload is stored in.
//
// A sealed payload is kept as a JSON string (the stores check that a
// payload is JSON), so that it stays valid wherever a payload goes:
//
//	"rdenc:<key id>:<base64url without padding of: version | nonce | ciphertext and tag>"
//
// version is one byte (1), the nonce 12 random bytes, the tag 16 bytes.
// The key id is in clear so that a store can count and find the payloads
// of each key (rotation) without a key. The associated data is
// "redrive payload", the version, the key id and the job's queue, so a
// sealed payload copied into a job of another queue does not open.
package seal

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Version is the envelope version this package writes.
const Version byte = 1

// KeySize is the size of a key: AES-256.
const KeySize = 32

// MaxKeyID is the longest key id.
const MaxKeyID = 32

// prefix starts every sealed payload (after the JSON string's quote).
const prefix = `"rdenc:`

const nonceSize = 12

// Errors of Open. Both make a job undecryptable.
var (
	// ErrUnknownKey is a sealed payload under a key id the keyring does
	// not hold.
	ErrUnknownKey = errors.New("unknown key id")
	// ErrCorrupt is a sealed payload that is malformed, or whose tag does
	// not match (another key of the same id, altered bytes, or a payload
	// copied from a job of another queue).
	ErrCorrupt = errors.New("malformed envelope or authentication failed")
	// ErrNoKeys is a keyring without a key.
	ErrNoKeys = errors.New("no current key")
)

// Keyring holds the keys payloads are sealed and opened with. The current
// key seals; every key opens. It is safe for concurrent use.
type Keyring struct {
	current string
	ids     []string // in the order given, current first
	keys    map[string]cipher.AEAD
}

// Current returns the id of the key new payloads are sealed with.
func (k *Keyring) Current() string { return k.current }

// IDs returns the ids of the keys, the current one first.
func (k *Keyring) IDs() []string { return append([]string(nil), k.ids...) }

// NewKeyring returns a keyring of keys (id to 32-byte key), current
// sealing.
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	if _, ok := keys[current]; !ok {
		return nil, fmt.Errorf("seal: %w: %q is not among the keys", ErrNoKeys, current)
	}
	k := &Keyring{current: current, keys: make(map[string]cipher.AEAD, len(keys)), ids: []string{current}}
	for id, key := range keys {
		if err := checkID(id); err != nil {
			return nil, err
		}
		a, err := newAEAD(key)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", id, err)
		}
		k.keys[id] = a
		if id != current {
			k.ids = append(k.ids, id)
		}
	}
	return k, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("key is %d bytes, not %d (AES-256)", len(key), KeySize)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return nil, fmt.Errorf("gcm: %w", err)
	}
	return a, nil
}

func checkID(id string) error {
	if id == "" || len(id) > MaxKeyID {
		return fmt.Errorf("seal: key id %q: 1 to %d characters", id, MaxKeyID)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("seal: key id %q: only letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

// ParseKeys reads a key list: one key a line, "id:base64key" (standard
// base64 of 32 bytes, padded or not). Blank lines and lines starting with
// '#' are skipped; a line may also hold several keys separated by commas
// (the environment's form). The first key listed is the current one:
// rotate by adding the new key at the top and keeping the old ones below
// until `redrive keys rotate` has re-sealed their payloads. Errors name
// the line, never a key's bytes.
func ParseKeys(data []byte) (*Keyring, error) {
	k := &Keyring{keys: map[string]cipher.AEAD{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		for _, field := range strings.Split(text, ",") {
			field = strings.TrimSpace(field)
			if field == "" {
				continue
			}
			id, b64, ok := strings.Cut(field, ":")
			if !ok {
				return nil, fmt.Errorf("seal: line %d: want id:base64key", line)
			}
			id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
			if err := checkID(id); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			if _, dup := k.keys[id]; dup {
				return nil, fmt.Errorf("seal: line %d: duplicate key id %q", line, id)
			}
			key, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				key, err = base64.RawStdEncoding.DecodeString(b64)
			}
			if err != nil {
				return nil, fmt.Errorf("seal: line %d: key %q: bad base64", line, id)
			}
			a, err := newAEAD(key)
			if err != nil {
				return nil, fmt.Errorf("seal: line %d: key %q: %w", line, id, err)
			}
			k.keys[id] = a
			k.ids = append(k.ids, id)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("seal: line %d: %w", line+1, err)
	}
	if len(k.ids) == 0 {
		return nil, fmt.Errorf("seal: %w: the key list holds no key", ErrNoKeys)
	}
	k.current = k.ids[0]
	return k, nil
}

// IsSealed reports whether a stored payload is a sealed envelope.
func IsSealed(stored []byte) bool { return bytes.HasPrefix(stored, []byte(prefix)) }

// KeyID returns the key id of a sealed payload; ok is false for a payload
// that is not sealed or is malformed.
func KeyID(stored []byte) (id string, ok bool) {
	if !IsSealed(stored) {
		return "", false
	}
	rest := stored[len(prefix):]
	i := bytes.IndexByte(rest, ':')
	if i <= 0 || i > MaxKeyID {
		return "", false
	}
	return string(rest[:i]), true
}

func additional(id, queue string) []byte {
	b := make([]byte, 0, 24+len(id)+len(queue))
	b = append(b, "redrive payload"...)
	b = append(b, 0, Version)
	b = append(b, id...)
	b = append(b, 0)
	return append(b, queue...)
}

// Seal returns payload sealed under the current key for a job of queue.
// The nonce is random (crypto/rand).
func (k *Keyring) Seal(queue string, payload []byte) ([]byte, error) {
	return k.SealWith(k.current, queue, payload)
}

// SealWith is Seal under the key id (tests and rotation).
func (k *Keyring) SealWith(id, queue string, payload []byte) ([]byte, error) {
	a, ok := k.keys[id]
	if !ok {
		return nil, fmt.Errorf("seal: %w %q", ErrUnknownKey, id)
	}
	raw := make([]byte, 1+nonceSize, 1+nonceSize+len(payload)+a.Overhead())
	raw[0] = Version
	if _, err := rand.Read(raw[1 : 1+nonceSize]); err != nil {
		return nil, fmt.Errorf("seal: nonce: %w", err)
	}
	raw = a.Seal(raw, raw[1:1+nonceSize], payload, additional(id, queue))
	enc := base64.RawURLEncoding
	out := make([]byte, 0, len(prefix)+len(id)+2+enc.EncodedLen(len(raw)))
	out = append(out, prefix...)
	out = append(out, id...)
	out = append(out, ':')
	out = enc.AppendEncode(out, raw)
	return append(out, '"'), nil
}

// Open returns the payload a sealed envelope of a job of queue holds.
// It fails with ErrUnknownKey or ErrCorrupt, never panics.
func (k *Keyring) Open(queue string, stored []byte) ([]byte, error) {
	id, ok := KeyID(stored)
	if !ok || len(stored) < len(prefix)+len(id)+2 || stored[len(stored)-1] != '"' {
		return nil, fmt.Errorf("seal: %w", ErrCorrupt)
	}
	a, ok := k.keys[id]
	if !ok {
		return nil, fmt.Errorf("seal: %w %q", ErrUnknownKey, id)
	}
	body := stored[len(prefix)+len(id)+1 : len(stored)-1]
	raw, err := base64.RawURLEncoding.AppendDecode(nil, body)
	if err != nil || len(raw) < 1+nonceSize+a.Overhead() || raw[0] != Version {
		return nil, fmt.Errorf("seal: %w", ErrCorrupt)
	}
	out, err := a.Open(nil, raw[1:1+nonceSize], raw[1+nonceSize:], additional(id, queue))
	if err != nil {
		return nil, fmt.Errorf("seal: %w", ErrCorrupt)
	}
	return out, nil
}

// Policy is which queues' payloads a store seals, and with which keys.
// It implements store.PayloadCodec.
type Policy struct {
	// Keys seal and open; nil opens nothing (every sealed payload is
	// undecryptable) and seals nothing.
	Keys *Keyring
	// All seals the payloads of every queue; otherwise only those of
	// Queues.
	All    bool
	Queues map[string]bool
}

// Seals reports whether the payloads of queue are sealed. Names starting
// with '/' are not queues (no queue's name holds one) but what a store
// keeps beside jobs (an operation's new payload): always sealed with keys.
func (p *Policy) Seals(queue string) bool {
	return p != nil && p.Keys != nil && (p.All || p.Queues[queue] || strings.HasPrefix(queue, "/"))
}

// Seal returns the stored form of a payload of a job of queue: sealed
// under the current key when the queue is sealed, payload itself
// otherwise.
func (p *Policy) Seal(queue string, payload []byte) ([]byte, error) {
	if !p.Seals(queue) {
		if p == nil || p.Keys == nil || !IsSealed(payload) {
			return payload, nil
		}
		// A plaintext that looks like an envelope would be taken for
		// one when read: seal it, so it reads back as it was.
	}
	return p.Keys.Seal(queue, payload)
}

// Open returns the plaintext of a stored payload of a job of queue: a
// payload that is not sealed is returned as it is.
func (p *Policy) Open(queue string, stored []byte) ([]byte, error) {
	if !IsSealed(stored) {
		return stored, nil
	}
	if p == nil || p.Keys == nil {
		id, _ := KeyID(stored)
		return nil, fmt.Errorf("seal: %w %q (no payload keys configured)", ErrUnknownKey, id)
	}
	return p.Keys.Open(queue, stored)
}

// Current returns the id of the current key, "" without keys.
func (p *Policy) Current() string {
	if p == nil || p.Keys == nil {
		return ""
	}
	return p.Keys.Current()
}

// Reseal returns stored, a payload of a job of queue sealed under another
// key than the current one, sealed under the current key (changed true),
// whether or not the queue is still among those sealed; and a payload
// not sealed of a queue that is sealed now (stored before the queue was
// encrypted), sealed under the current key. A payload already under the
// current key, or not sealed in a queue not sealed, is left as it is.
func (p *Policy) Reseal(queue string, stored []byte) (out []byte, changed bool, err error) {
	if p == nil || p.Keys == nil {
		return stored, false, nil
	}
	id, ok := KeyID(stored)
	if !ok {
		if IsSealed(stored) || !p.Seals(queue) {
			return stored, false, nil // malformed (it stays undecryptable), or to stay in clear
		}
		out, err = p.Keys.Seal(queue, stored)
		if err != nil {
			return nil, false, err
		}
		return out, true, nil
	}
	if id == p.Keys.Current() {
		return stored, false, nil
	}
	plain, err := p.Keys.Open(queue, stored)
	if err != nil {
		return nil, false, err
	}
	out, err = p.Keys.Seal(queue, plain)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// SealExport returns payload, the plaintext of a job of queue, in the
// form a DLQ export writes it: sealed under the current key (key is its
// id) when the policy has keys and the queue is sealed, or stored is set
// (the payload was stored sealed, whatever the queue is now), or the
// plaintext looks like an envelope (so that an import reads it back as
// it was); payload itself and key "" otherwise. The current key, not
// the key the payload was stored under, so that an export made before a
// rotation's end does not need the old key later, and a payload a queue
// kept in clear from before its encryption leaves sealed too.
func (p *Policy) SealExport(queue string, payload []byte, stored bool) (out []byte, key string, err error) {
	if p == nil || p.Keys == nil || !(p.Seals(queue) || stored || IsSealed(payload)) {
		return payload, "", nil
	}
	out, err = p.Keys.Seal(queue, payload)
	if err != nil {
		return nil, "", err
	}
	return out, p.Keys.Current(), nil
}
