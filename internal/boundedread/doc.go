// Package boundedread reads a file or a stream whole, up to a limit the
// caller names: the one way cpmla reads untrusted input into memory at
// once (checkpoint indexes and files, tokenizer files, chat templates,
// text files of the command line, HTTP bodies it fetches). A file larger
// than the limit is refused by its size before any byte is read; anything
// that yields more (a file that grows, a pipe, a device, a body) is
// refused after limit+1 bytes.
//
// It must never read past limit+1 bytes of anything, allocate more than
// limit+1 bytes for it, or follow what it reads anywhere else.
package boundedread
