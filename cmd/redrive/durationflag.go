package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/redrivehq/redrive/server"
)

// durationValue is a duration flag that reads what --since reads: a Go
// duration (90m, 1h30m) or a whole number of days (7d), so that no flag
// takes 7d while another refuses it (server.ParseDuration).
type durationValue struct{ d *time.Duration }

// durationFlag defines a duration flag taking days too.
func durationFlag(f *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.Var(durationValue{p}, name, usage)
}

func (v durationValue) Set(s string) error {
	d, ok := server.ParseDuration(s)
	if !ok {
		return fmt.Errorf("%q is not a duration such as 30s, 15m, 1h30m or 7d", s)
	}
	*v.d = d
	return nil
}

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0" // pflag shows no default for "0"
	}
	return server.FormatDuration(*v.d)
}

func (v durationValue) Type() string { return "duration" }
