package redrive_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestLimitSetSelect: a LimitSet picks the first limit that selects a
// job and reads its group as the store path does, refuses a job whose
// group cannot be read naming the field, and refuses a bad list as
// SetLimits does.
func TestLimitSetSelect(t *testing.T) {
	s, err := redrive.NewLimitSet([]redrive.ConcurrencyLimit{
		{Name: "mail", Queue: "mail", Max: 2},
		{Name: "cust", Key: "payload.customer.id", Max: 5, Rate: "10/s", Burst: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	sel, ok, err := s.Select("mail", "send", json.RawMessage(`{}`), "")
	if err != nil || !ok || sel.Name != "mail" || sel.Group != "" || sel.Max != 2 {
		t.Fatalf("mail: %+v %v %v", sel, ok, err)
	}
	sel, ok, err = s.Select("q", "k", json.RawMessage(`{"customer":{"id":5.0}}`), "")
	if err != nil || !ok || sel.Name != "cust" || sel.Group != "5" || sel.Rate.N != 10 || sel.Rate.Burst != 3 {
		t.Fatalf("cust: %+v %v %v", sel, ok, err)
	}
	_, _, err = s.Select("q", "k", json.RawMessage(`{"customer":{}}`), "")
	var fe *redrive.FieldError
	if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "payload.customer.id" {
		t.Fatalf("missing field: %v", err)
	}
	if _, ok, _ := (*redrive.LimitSet)(nil).Select("q", "k", nil, ""); ok {
		t.Fatal("a nil set selected a job")
	}
	if _, err := redrive.NewLimitSet([]redrive.ConcurrencyLimit{{Name: "x", Max: 0}}); !errors.Is(err, redrive.ErrInvalid) {
		t.Fatalf("max 0 without a rate: %v", err)
	}
}

// TestLimitSetSelectsQueue: SelectsQueue is whether some limit of the
// set may select a queue's jobs: one of that queue, or of every queue.
func TestLimitSetSelectsQueue(t *testing.T) {
	s, err := redrive.NewLimitSet([]redrive.ConcurrencyLimit{{Name: "mail", Queue: "mail", Max: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if !s.SelectsQueue("mail") || s.SelectsQueue("other") {
		t.Errorf("queue limit: mail %v, other %v", s.SelectsQueue("mail"), s.SelectsQueue("other"))
	}
	all, err := redrive.NewLimitSet([]redrive.ConcurrencyLimit{{Name: "all", Kind: "send", Max: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if !all.SelectsQueue("other") {
		t.Error("a limit of every queue does not select other")
	}
	var none *redrive.LimitSet
	if none.SelectsQueue("mail") {
		t.Error("a nil set selects")
	}
}
