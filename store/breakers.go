package store

// Breakers is the part of a Store that shares circuit breakers' state
// between the processes using the store.
type Breakers interface {
}
