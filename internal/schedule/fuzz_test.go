package schedule

import (
	"testing"
	"time"
)

// FuzzParse: any cron expression and zone either fails with a field
// error or gives a schedule whose occurrences strictly increase.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0 2 * * *", "@daily", "@hourly", "*/15 9-17 * * MON-FRI", "0 0 29 2 *", "0 0 30 2 *",
		"@every 1s", "TZ=UTC * * * * *", "* * * *", "1-5/2 */3 1,15 JAN-MAR SUN", "? ? ? ? ?", "0-59/0 * * * *", "L * * * *"} {
		f.Add(s, "America/New_York", int64(0))
		f.Add(s, "", int64(1_700_000_000))
	}
	f.Add("", "", int64(1500))
	f.Fuzz(func(t *testing.T, expr, zone string, everyMs int64) {
		spec := Spec{Cron: expr, Zone: zone}
		if expr == "" {
			spec.Every = time.Duration(everyMs) * time.Millisecond
		}
		s, err := Parse(spec)
		if err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("Parse(%+v): error %T %v, want a *FieldError", spec, err, err)
			}
			return
		}
		from := time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)
		for range 5 {
			n := s.Next(from)
			if n.IsZero() {
				return
			}
			if !n.After(from) {
				t.Fatalf("%+v: Next(%s) = %s, not after", spec, from, n)
			}
			from = n
		}
	})
}
