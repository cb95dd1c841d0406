package store

// Schedules is the part of a Store that keeps the schedules of periodic
// jobs.
type Schedules interface {
}
