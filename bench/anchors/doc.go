// Package anchors benchmarks redrive's resilience core against the libraries
// it competes with: failsafe-go (retrypolicy, circuitbreaker),
// cenkalti/backoff v5 and sony/gobreaker v2.
//
// It is a module of its own so that redrive's go.mod never depends on them.
// Every benchmark names its library in a lib=NAME sub-benchmark key, so that
//
//	go test -run='^$' -bench=. -benchmem -count=10 . > anchors.txt
//	benchstat -col /lib anchors.txt
//
// puts the libraries side by side, redrive first. docs/BENCHMARKS.md
// ("Resilience core") records the results and says exactly what each
// benchmark measures.
package anchors
