module github.com/redrivehq/redrive/bench/anchors

go 1.26.0

replace github.com/redrivehq/redrive => ../..

require (
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/redrivehq/redrive v0.0.0-00010101000000-000000000000
	github.com/sony/gobreaker/v2 v2.4.0
)

require github.com/bits-and-blooms/bitset v1.24.4 // indirect
