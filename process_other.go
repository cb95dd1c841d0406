//go:build !unix

package redrive

// processAlive cannot tell on this system: assume alive (leases decide).
func processAlive(int) bool { return true }

// processInstance is unknown on this system: no worker is found gone by
// its PID, leases decide.
func processInstance() string { return "" }
