package redrive

// HooksRegistered reports whether the in-process hooks registry holds an
// entry for c's store.
func HooksRegistered(c *Client) bool { return c.hooks() != nil }
