//go:build !linux

package download_test

import "syscall"

// minioProcAttr: elsewhere than Linux, the cleanups kill a test's MinIO.
func minioProcAttr() *syscall.SysProcAttr { return nil }
