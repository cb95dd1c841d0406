// Package rhttp provides a resilient http.RoundTripper: it retries failed
// requests by a retry.Policy, classifies every failure with the failure
// package, honours Retry-After and fences failing hosts off with circuit
// breakers.
//
// Plug a Transport into any http.Client (or use NewClient):
//
//	client := rhttp.NewClient(&rhttp.Transport{
//		Breakers: breaker.NewRegistry(breaker.Config{}),
//	})
//	resp, err := client.Get("https://api.example.com/v1/things")
//
// # What is retried
//
// Attempt 1 is the request as the caller made it. A transport error (refused
// or reset connection, timeout, DNS failure) or a response with a status of
// 400 or more is classified, and the policy decides: Transient, RateLimited
// and Unknown failures are retried after the policy's backoff until its
// retries are used up; Permanent (400, 404, 410, 422, 451, TLS errors) and
// NeedsAuth (401, 403) failures are not retried at all. A Retry-After header
// (seconds or HTTP date) on a 429 or 503 raises the delay, clamped to the
// policy's MaxRetryAfter, plus a positive jitter (by default up to 10% of
// it, at most 1s; see retry.Policy.RetryAfterJitter) so that requests turned
// away together do not all come back at once. The delay is never shorter
// than the server asked.
//
// Every method is retried, POST included: a request that failed with a
// transport error may still have reached the server, so give
// non-idempotent requests an idempotency key the server understands, or use
// a policy with MaxRetries 0 for them.
//
// A request body is sent again only when it can be replayed, that is when
// the request has a GetBody function (http.NewRequest sets one for
// *bytes.Buffer, *bytes.Reader and *strings.Reader bodies). A request whose
// body cannot be replayed is sent once, and the reason it was not retried is
// logged.
//
// # What the caller gets back
//
// As for any RoundTripper, an HTTP status is not an error: when the
// Transport gives up on a response (a 404, or a 503 once retries are
// exhausted) it returns that last response, body untouched, and a nil error.
// The responses it discards on the way are drained (up to 64 KiB) and closed
// so their connections can be reused. When it gives up on a transport
// error, it returns an *Error that states the number of attempts and wraps
// the cause, so errors.Is and errors.As reach it (syscall.ECONNREFUSED,
// context.Canceled, *breaker.OpenError, ...).
//
// The request's context bounds everything: no attempt starts after it is
// done, a backoff sleep ends at once when it is canceled, and a delay that
// would end after its deadline is not waited for; the last result is
// returned instead.
//
// # Circuit breakers
//
// With Breakers set, each request consults the breaker of its host before
// every attempt. Transport errors and 5xx responses count as failures; any
// other response counts as a success (a 404 means the host is up); a
// request canceled by its caller does not count, while one that runs past
// its context's deadline does (the host was too slow to answer). A
// rate-limited answer (a 429, a 503 with Retry-After, or any response the
// Classifier finds RateLimited) does not count either, unless the breaker's
// Config.CountRateLimited is set: the host is up and asks callers to slow
// down, which Retry-After handles. Breakers
// are named by HostKey unless Transport.BreakerName says otherwise. While
// the breaker is open
// the request is not sent: RoundTrip returns an *Error wrapping the
// *breaker.OpenError (errors.Is(err, breaker.ErrOpen) holds) at once, without
// waiting for the breaker to half-open. When the breaker opens during a
// request's own retries and will still be open when the next retry is due,
// the request stops there and returns its last result.
//
// # Logging and metrics
//
// Each retry is logged at Info level with the method, the URL (without
// query or user information), the number of the attempt that failed, the
// delay, the failure class and reason, and the status or error. OnRetry
// receives the same facts as a RetryInfo, for metrics.
package rhttp
