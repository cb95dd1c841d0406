package download

import "io"

// SetWriteHook makes h write its partial files through wrap (to inject
// disk errors).
func SetWriteHook(h *Handler, wrap func(io.Writer) io.Writer) { h.wrapWriter = wrap }

// ContentRange parses a Content-Range header.
var ContentRange = contentRange

// Sanitize makes a served name safe as a file name.
var Sanitize = sanitize

// PartName is the name of a job's partial file of name.
var PartName = partName
