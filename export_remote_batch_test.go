package redrive

// SetRemoteWriteHooks sets test hooks into r's shared writes of
// outcomes: joined is called once a call's outcomes joined a write (or
// found one holding one of their pairs, to wait for the next), write
// before a write starts, with the number of calls it carries. Call it
// before r is used.
func SetRemoteWriteHooks(r *RemoteWorkers, joined func(), write func(calls int)) {
	r.hooks = &remoteHooks{joined: joined, write: write}
}
