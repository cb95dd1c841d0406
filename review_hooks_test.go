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
