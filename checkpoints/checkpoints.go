package checkpoints

import (
	"embed"
	"io/fs"
	"slices"
)

//go:embed cpmla-tiny cpmla-tiny-fp8
var files embed.FS

// names are the built-in checkpoints, each a directory of files.
var names = []string{"cpmla-tiny", "cpmla-tiny-fp8"}

// Names lists the built-in checkpoints in sorted order.
func Names() []string { return slices.Clone(names) }

// Open returns the files of the built-in checkpoint name at the root of a
// read-only fs.FS, and false when no built-in checkpoint has that name.
func Open(name string) (fs.FS, bool) {
	if !slices.Contains(names, name) {
		return nil, false
	}
	sub, err := fs.Sub(files, name)
	if err != nil {
		return nil, false
	}
	return sub, true
}
