package download_test

import "syscall"

// minioProcAttr makes a test's MinIO die with the test binary, even when
// go test's -timeout kills it before the cleanups run.
func minioProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
