//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package download

import (
	"os"
	"path/filepath"
	"sync"
)

// openPart opens (creating it) the partial file at path. (The caller
// removes a symbolic link in its place first.)
func openPart(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}

// held are the partial files locked by this process, where the system
// has no flock: attempts of other processes are not excluded.
var held = struct {
	sync.Mutex
	paths map[string]bool
}{paths: map[string]bool{}}

// lockPart marks f's path as held by this process until the returned
// func is called; errInUse when it already is.
func lockPart(f *os.File) (func(), error) {
	p, err := filepath.Abs(f.Name())
	if err != nil {
		return nil, err
	}
	held.Lock()
	defer held.Unlock()
	if held.paths[p] {
		return nil, errInUse
	}
	held.paths[p] = true
	return func() {
		held.Lock()
		delete(held.paths, p)
		held.Unlock()
	}, nil
}
