package tokenizer

import "unicode/utf8"

// StreamDecoder turns a stream of generated ids into text pieces. A token
// may end in the middle of a multi-byte character; the decoder holds such
// an incomplete character back until the following tokens complete it, so
// every piece it returns ends on a character boundary. Bytes that can never
// become a valid character are passed through at once. Special tokens are
// skipped, as Decode(ids, true) does (a decoder made with
// NewStreamDecoderKeepingSpecial keeps them, as Decode(ids, false)); the
// concatenation of everything Add and Flush return equals that Decode
// (without clean_up_tokenization_spaces, which needs the whole text).
//
// A StreamDecoder belongs to one sequence and is not safe for concurrent
// use.
type StreamDecoder struct {
	t           *Tokenizer
	pending     []byte
	keepSpecial bool
}

// NewStreamDecoder returns a decoder for one generated sequence.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t, pending: make([]byte, 0, 16)}
}

// NewStreamDecoderKeepingSpecial returns a decoder that also writes special
// tokens (Decode(ids, false)), which is what a reasoning or tool-call parser
// must see (vLLM sets skip_special_tokens=False for them).
func (t *Tokenizer) NewStreamDecoderKeepingSpecial() *StreamDecoder {
	return &StreamDecoder{t: t, pending: make([]byte, 0, 16), keepSpecial: true}
}

// Add decodes one id and returns the text that is now complete (possibly
// "").
func (d *StreamDecoder) Add(id int) string {
	var buf [64]byte
	return string(d.AppendAdd(buf[:0], id))
}

// AppendAdd is Add that appends the completed text to dst instead of
// returning it: it allocates only when dst or the decoder's own buffer
// must grow, so a caller that reuses dst decodes without allocating.
func (d *StreamDecoder) AppendAdd(dst []byte, id int) []byte {
	d.pending = d.t.appendToken(d.pending, id, !d.keepSpecial)
	cut := completePrefix(d.pending)
	dst = append(dst, d.pending[:cut]...)
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return dst
}

// Flush returns whatever is held back (an incomplete character at the end
// of the sequence) and resets the decoder.
func (d *StreamDecoder) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// completePrefix returns the length of the longest prefix of b that does
// not end inside a character that later bytes could still complete.
func completePrefix(b []byte) int {
	// Only the last three bytes can belong to an unfinished character.
	for back := 1; back <= 3 && back <= len(b); back++ {
		start := len(b) - back
		c := b[start]
		if c < utf8.RuneSelf {
			return len(b) // ASCII: nothing pending after it
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[start:]) {
				return len(b)
			}
			return start
		}
	}
	return len(b)
}
