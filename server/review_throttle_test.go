package server

import (
	"fmt"
	"testing"
	"time"
)

// TestThrottleFullTableSparesKnownClients: an attacker with more
// addresses than the throttle remembers (an IPv6 /50 holds 16,384 /64s)
// fills its table with wrong guesses and drains the overflow bucket that
// the clients beyond the table share. A client that has used the right
// token before the attack must keep being served: it cannot be the
// guesser, and refusing it locks every legitimate automation client out
// for as long as the attacker keeps the table full.
func TestThrottleFullTableSparesKnownClients(t *testing.T) {
	now := time.Now()
	th := loginThrottle{now: func() time.Time { return now }}
	right := func() bool { return true }
	wrong := func() bool { return false }
	if allowed, ok, _ := th.guess("automation", right); !allowed || !ok {
		t.Fatal("the automation client with the right token was refused before the attack")
	}
	for i := range 2 * maxThrottled {
		th.guess(fmt.Sprintf("attacker-%d", i), wrong)
	}
	for range loginBurst {
		th.guess("attacker-overflow", wrong)
	}
	if allowed, _, _ := th.guess("attacker-new", wrong); allowed {
		t.Fatal("a fresh attacker address got a guess once the table and the overflow were used up")
	}
	now = now.Add(time.Second)
	if allowed, ok, _ := th.guess("automation", right); !allowed || !ok {
		t.Error("a client that had sent the right token is locked out by another client's wrong guesses")
	}
	// Its own wrong guesses still count: being known buys no guesses.
	for range loginBurst {
		th.guess("automation", wrong)
	}
	if allowed, _, _ := th.guess("automation", right); allowed {
		t.Error("a known client that used up its own guesses was not throttled")
	}
	if n := len(th.clients); n > 2*maxThrottled {
		t.Errorf("the throttle remembers %d clients", n)
	}
}
