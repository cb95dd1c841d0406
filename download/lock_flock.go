//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package download

import (
	"errors"
	"os"
	"syscall"
)

// openPart opens (creating it) the partial file at path without
// following a symbolic link in its place.
func openPart(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
}

// lockPart takes an exclusive advisory lock on f, without waiting: the
// error is errInUse when another open file (of this process or another)
// holds it. Closing f releases the lock; so does the returned func, a
// no-op here.
func lockPart(f *os.File) (func(), error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return func() {}, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return nil, errInUse
		}
		return nil, err
	}
}
