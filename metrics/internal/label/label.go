// Package label holds what redrive's Prometheus collectors share about
// label and sample values.
package label

// Unknown is the label value standing for an empty name.
const Unknown = "unknown"

// NonEmpty returns s, or Unknown when s is empty: Prometheus treats an
// empty label as a missing one, which breaks joins and aggregations.
func NonEmpty(s string) string {
	if s == "" {
		return Unknown
	}
	return s
}

// Bool is a boolean as a sample value: 1 or 0.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
