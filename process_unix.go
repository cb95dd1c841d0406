//go:build unix

package redrive

import (
	"errors"
	"os"
	"syscall"

	"github.com/redrivehq/redrive/internal/boot"
)

// processAlive reports whether a process with the PID exists in this PID
// namespace (signal 0 checks without sending anything).
func processAlive(pid int) bool {
	if pid <= 0 {
		return true // unknown: assume alive, the lease decides
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// processInstance identifies this machine's boot and this process's PID
// namespace, so that two workers compare PIDs only when the same kernel
// boot and namespace give them meaning. It is "" where the system does
// not say (then no worker is ever found gone by its PID).
func processInstance() string {
	id := boot.ID()
	if id == "" {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return id + "/" + ns
}
