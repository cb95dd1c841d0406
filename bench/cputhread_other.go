//go:build !linux

package bench

import "time"

// threadCPU is, without a per-thread figure, this process's user and
// system CPU time: what runs beside the calling thread counts too.
func threadCPU() (user, sys time.Duration) { return processCPU() }
