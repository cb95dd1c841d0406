package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Secrets is the part of a Store that keeps random secrets shared by
// every process using the store, each under a name: the key that signs
// the dashboard's session cookies (server), which signing out replaces
// so that every session ends, in every process and for good (a restart
// reads the same key back).
type Secrets interface {
	// Secret returns the secret named name, creating it (SecretSize
	// random bytes) when there is none. Concurrent first calls, from any
	// process, all get the one secret the store kept.
	Secret(ctx context.Context, name string) ([]byte, error)

	// RotateSecret replaces the secret named name (creating it if there
	// is none) with SecretSize new random bytes, and returns them. Once it
	// returned, Secret returns the new bytes (or those of a later
	// rotation) in every process.
	RotateSecret(ctx context.Context, name string) ([]byte, error)
}

// SecretSize is the size in bytes of the secrets a store creates.
const SecretSize = 32

// maxSecretName bounds a secret's name, in bytes.
const maxSecretName = 200

// NewSecret returns SecretSize random bytes, as a store creates a secret.
func NewSecret() ([]byte, error) {
	b := make([]byte, SecretSize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("new secret: %w", err)
	}
	return b, nil
}

// CheckSecretName returns an ErrInvalid error for a name that cannot name
// a secret: empty, longer than 200 bytes, not valid UTF-8 or with control
// characters.
func CheckSecretName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: secret name is empty", ErrInvalid)
	case len(name) > maxSecretName:
		return fmt.Errorf("%w: secret name is %d bytes long; the limit is %d", ErrInvalid, len(name), maxSecretName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: secret name is not valid UTF-8", ErrInvalid)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: secret name %q contains a control character", ErrInvalid, name)
	}
	return nil
}
