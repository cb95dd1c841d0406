package seal

import (
	"fmt"
	"strings"
)

// HeaderSealed marks a broker message (a RabbitMQ header, a Kafka record
// header) whose body is a sealed envelope; its value is the key id. A
// consumer opens the body of a message so marked, and only of one so
// marked: an unmarked body is plaintext, whatever it holds.
const HeaderSealed = "redrive-sealed"

// Bodies is which broker queues (RabbitMQ work queues, Kafka main topics)
// carry their message bodies sealed, and with which keys. A body is
// sealed in the envelope a stored payload is kept in, its associated
// data bound to the work queue's (main topic's) name: retry tiers, delay
// queues and the dead-letter queue carry it unchanged.
type Bodies struct {
	// Keys seal and open; nil seals nothing and opens nothing (a marked
	// body is then undecryptable).
	Keys *Keyring
	// All seals the bodies of every queue; otherwise only those of
	// Names.
	All   bool
	Names map[string]bool
}

// Seals reports whether the bodies of queue are sealed.
func (b *Bodies) Seals(queue string) bool {
	return b != nil && b.Keys != nil && (b.All || b.Names[queue])
}

// Seal returns body sealed under the current key for queue, and the key
// id to mark the message with; body itself and "" when the queue's bodies
// are not sealed.
func (b *Bodies) Seal(queue string, body []byte) (out []byte, keyID string, err error) {
	if !b.Seals(queue) {
		return body, "", nil
	}
	out, err = b.Keys.Seal(queue, body)
	if err != nil {
		return nil, "", err
	}
	return out, b.Keys.Current(), nil
}

// Open returns the plaintext of a body delivered for queue: body itself
// when the message is not marked sealed (marked false), else the opened
// envelope. It fails, wrapping ErrUnknownKey or ErrCorrupt, when a
// marked body does not open (no keys, a key id not held, altered bytes,
// not an envelope, sealed for another queue); it never panics.
func (b *Bodies) Open(queue string, body []byte, marked bool) ([]byte, error) {
	if !marked {
		return body, nil
	}
	if b == nil || b.Keys == nil {
		id, _ := KeyID(body)
		return nil, fmt.Errorf("seal: %w %q (no payload keys configured)", ErrUnknownKey, id)
	}
	return b.Keys.Open(queue, body)
}

// ParseNames parses a list of queue (topic) names, comma-separated, or
// "*" for all; check validates each name. setting names the setting in
// errors.
func ParseNames(setting, v string, check func(string) error) (all bool, names map[string]bool, err error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return false, nil, nil
	}
	if v == "*" {
		return true, nil, nil
	}
	names = map[string]bool{}
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if n == "*" {
			return false, nil, fmt.Errorf(`%s: "*" stands alone (every name), not in a list`, setting)
		}
		if check != nil {
			if err := check(n); err != nil {
				return false, nil, fmt.Errorf("%s: %w", setting, err)
			}
		}
		names[n] = true
	}
	return false, names, nil
}
