package store

// Operations is the part of a Store that keeps durable bulk operations.
type Operations interface {
}
