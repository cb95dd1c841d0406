package redrive_test

import (
	"context"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// loggedStore is a store middleware held by value with a func field: its
// type is not comparable.
type loggedStore struct {
	store.Store
	log func(string)
}

// plainWrap is a store middleware held by value whose type is comparable
// (an interface field) though the value it holds may not be.
type plainWrap struct {
	store.Store
}

// TestClientOnWrappedStoreValue checks that a Client of a store
// middleware held by value, whose type is comparable but whose dynamic
// value is not (it wraps a non-comparable middleware value), enqueues
// without panicking: the hooks registry must not hash such a key.
func TestClientOnWrappedStoreValue(t *testing.T) {
	st := openStore(t)
	s := plainWrap{Store: loggedStore{Store: st, log: func(string) {}}}
	c := redrive.NewClient(s, redrive.ClientOptions{Logger: quietLogger()})
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Enqueue on a wrapped store panicked: %v", r)
		}
	}()
	if _, err := c.Enqueue(context.Background(), "k", nil); err != nil {
		t.Fatal(err)
	}
}

// TestHooksEntryRemovedAfterRun checks that the hooks registry does not
// keep a store once every worker of it has returned from Run, so that
// Clients and stores created and dropped are not kept alive by it.
func TestHooksEntryRemovedAfterRun(t *testing.T) {
	st := openStore(t)
	for range 3 {
		c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
		w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: quietLogger()})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		if _, err := c.Enqueue(context.Background(), "k", nil); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if redrive.HooksRegistered(c) {
			t.Fatal("the hooks registry still holds the store after its only worker returned")
		}
	}
}
