package server

import (
	"bytes"
	"strings"

	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/tokenizer"
)

// tokenRecord is one generated token as the client sees it: its id, its
// log-probability and the byte offset of its text in the generated text.
// Text that a later token completes (an incomplete UTF-8 character) belongs
// to that later token.
type tokenRecord struct {
	id      int
	logprob float64
	top     []sampler.TokenLogprob
	offset  int
	end     int
}

// textStream turns generated tokens into text that is safe to release:
// whole characters only (the tokenizer's stream decoder) and never past a
// stop string. Text that could still be the beginning of a stop string is
// held back until later tokens rule the stop string in or out.
type textStream struct {
	dec      *tokenizer.StreamDecoder
	stops    []string
	text     strings.Builder
	released int // bytes of text handed out
	tokens   []tokenRecord
	tokOut   int // tokens handed out
	stopped  bool
	stopStr  string // the stop string that matched

	// includeStop releases a matched stop string with the text before it.
	includeStop bool
	// minTokens: as vLLM, a stop string counts only if it ends in the text
	// of token minTokens or later; minEnd is where that text starts.
	minTokens int
	minEnd    int
}

// newTextStream makes the text stream of one choice; keepSpecial keeps
// special tokens (<think>, <tool_call>, …) in the text, for output that a
// chat parser reads.
func newTextStream(tk *tokenizer.Tokenizer, stops []string, keepSpecial bool) *textStream {
	return &textStream{dec: streamDecoder(tk, keepSpecial), stops: stops}
}

// streamDecoder is the decoder of a choice's text, keeping special tokens
// or not: the text stream and the engine's stop matcher must use the same.
func streamDecoder(tk *tokenizer.Tokenizer, keepSpecial bool) *tokenizer.StreamDecoder {
	if keepSpecial {
		return tk.NewStreamDecoderKeepingSpecial()
	}
	return tk.NewStreamDecoder()
}

// add decodes one generated token and returns the text and tokens that are
// now released. stopped reports that a stop string was found: the text
// before it is released, the stop string and everything after it never are,
// and add must not be called again.
func (s *textStream) add(id int, logprob float64) (piece string, toks []tokenRecord, stopped bool) {
	return s.addToken(tokenRecord{id: id, logprob: logprob}, false)
}

// addToken is add for a token record; a hidden token (a stop token id)
// contributes no text.
func (s *textStream) addToken(t tokenRecord, hidden bool) (piece string, toks []tokenRecord, stopped bool) {
	if len(s.tokens) < s.minTokens {
		s.minEnd = s.text.Len()
	}
	t.offset = s.text.Len()
	if !hidden {
		s.text.WriteString(s.dec.Add(t.id))
	}
	t.end = s.text.Len()
	s.tokens = append(s.tokens, t)
	return s.release(false)
}

// finish flushes what the decoder holds back (an incomplete character at
// the very end) and releases all remaining text unless it contains a stop
// string.
func (s *textStream) finish() (piece string, toks []tokenRecord, stopped bool) {
	if s.stopped {
		return "", nil, true
	}
	if rest := s.dec.Flush(); rest != "" {
		s.text.WriteString(rest)
		if n := len(s.tokens); n > 0 {
			s.tokens[n-1].end = s.text.Len()
		}
	}
	return s.release(true)
}

// text returns everything released so far.
func (s *textStream) output() string { return s.text.String()[:s.released] }

func (s *textStream) release(final bool) (string, []tokenRecord, bool) {
	all := s.text.String()
	pending := all[s.released:]
	cut := len(all) // release up to here
	if at, n, ok := s.firstStop(pending); ok {
		cut = s.released + at
		s.stopped, s.stopStr = true, all[cut:cut+n]
		if s.includeStop {
			cut += n
		}
	} else if !final {
		cut -= heldBack(pending, s.stops)
	}
	piece := all[s.released:cut]
	s.released = cut
	first := s.tokOut
	for s.tokOut < len(s.tokens) {
		t := s.tokens[s.tokOut]
		if t.end <= cut || t.offset < cut || (final && !s.stopped) {
			s.tokOut++
			continue
		}
		break
	}
	return piece, s.tokens[first:s.tokOut], s.stopped
}

// firstStop returns the byte position and length of the earliest stop
// string in pending (the text after s.released) that ends past s.minEnd;
// none counts before min_tokens tokens exist.
func (s *textStream) firstStop(pending string) (int, int, bool) {
	if len(s.tokens) < s.minTokens {
		return 0, 0, false
	}
	best, length, found := len(pending), 0, false
	for _, stop := range s.stops {
		from := max(0, s.minEnd-s.released-len(stop)+1)
		for from <= len(pending) {
			i := strings.Index(pending[from:], stop)
			if i < 0 {
				break
			}
			i += from
			if s.released+i+len(stop) > s.minEnd {
				if i < best || !found {
					best, length, found = i, len(stop), true
				}
				break
			}
			from = i + 1
		}
	}
	return best, length, found
}

// heldBack is the length of the longest suffix of text that is a proper
// prefix of a stop string: text that the next tokens could turn into a stop
// string.
func heldBack(text string, stops []string) int {
	hold := 0
	for _, stop := range stops {
		for k := min(len(stop)-1, len(text)); k > hold; k-- {
			if strings.HasSuffix(text, stop[:k]) {
				hold = k
				break
			}
		}
	}
	return hold
}

// stopMatchers gives the engine a stopMatcher per sequence, so that the
// engine ends a sequence in the step whose token completes a stop string,
// rather than when the response sees it: no step runs past the stop, and
// what the engine generates (and drafts) does not depend on timing.
type stopMatchers struct {
	tk          *tokenizer.Tokenizer
	stops       [][]byte
	keep        int // the longest stop string's length minus one
	keepSpecial bool
	minTokens   int
}

func newStopMatchers(tk *tokenizer.Tokenizer, stops []string, keepSpecial bool, minTokens int) stopMatchers {
	m := stopMatchers{tk: tk, keepSpecial: keepSpecial, minTokens: minTokens}
	for _, s := range stops {
		m.stops = append(m.stops, []byte(s))
		m.keep = max(m.keep, len(s)-1)
	}
	return m
}

func (f stopMatchers) NewStopMatcher() engine.StopMatcher {
	return &stopMatcher{dec: streamDecoder(f.tk, f.keepSpecial), stops: f.stops, keep: f.keep, minTokens: f.minTokens,
		tail: make([]byte, 0, f.keep+256)}
}

// stopMatcher finds the token at which a textStream with the same stop
// strings, decoder and min_tokens stops: the first token whose text
// completes a stop string that ends in the text of token min_tokens or
// later. It keeps only the last bytes of text that a stop string could
// still span, so it allocates only when a token's text outgrows its buffer.
type stopMatcher struct {
	dec       *tokenizer.StreamDecoder
	stops     [][]byte
	keep      int // the longest stop string's length minus one
	minTokens int
	tokens    int
	tail      []byte
}

func (m *stopMatcher) Ends(tok int) bool {
	m.tokens++
	start := len(m.tail)
	m.tail = m.dec.AppendAdd(m.tail, tok)
	if m.tokens >= m.minTokens {
		for _, s := range m.stops {
			// Only a stop string ending in the new text is new.
			if bytes.Contains(m.tail[max(0, start-len(s)+1):], s) {
				return true
			}
		}
	}
	if n := len(m.tail); n > m.keep {
		m.tail = m.tail[:copy(m.tail, m.tail[n-m.keep:])]
	}
	return false
}
