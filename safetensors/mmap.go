package safetensors

import "errors"

// errNoMmap makes Open read the file into memory instead of mapping it.
var errNoMmap = errors.New("memory mapping unavailable")

// forceRead disables memory mapping; tests use it to cover the read path.
var forceRead = false
