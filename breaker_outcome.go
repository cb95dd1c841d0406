package redrive

import (
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
)

// breakerOutcome is what the engine records on a dependency's breaker for
// the error err of an attempt on a queue classified by c: err itself, unless
// c and the breaker's default rate-limit rule (breaker.DefaultIsRateLimited)
// disagree on whether err is a rate-limited answer. Then err is marked the
// queue's way: with breaker.MarkRateLimited when c finds it RateLimited (a
// message rule, a status override), and wrapped in its class otherwise (a
// 429 the queue classifies as, say, Transient counts like a Transient
// failure). The engine's classification thus decides for the breaker too.
// Only failures pay for it; nil is returned as is.
func breakerOutcome(c *failure.Classifier, err error) error {
	if err == nil {
		return nil
	}
	v := c.Classify(err)
	limited := v.Class == failure.RateLimited
	if limited == breaker.DefaultIsRateLimited(err) {
		return err
	}
	if limited {
		return breaker.MarkRateLimited(err)
	}
	return failure.Wrap(v.Class, err)
}
