// Package boot identifies the running kernel's boot: two readings agree
// only while the machine has not restarted, so what a process wrote
// without syncing is still there, in the page cache or on disk.
package boot

import (
	"os"
	"strings"
)

// ID returns the kernel's boot id (Linux's
// /proc/sys/kernel/random/boot_id), or "" where the system does not say.
func ID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
