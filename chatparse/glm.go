package chatparse

import (
	"strings"
	"unicode/utf8"
)

// The GLM tool-call format (GLM-4.5, and GLM-4.7/5 with the name ended by
// the first <arg_key> instead of a newline):
//
//	<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n…</tool_call>
const (
	glmCallStart = "<tool_call>"
	glmCallEnd   = "</tool_call>"
	glmKeyStart  = "<arg_key>"
	glmKeyEnd    = "</arg_key>"
	glmValStart  = "<arg_value>"
	glmValEnd    = "</arg_value>"
)

// glmEventKind is what a glmRegion found.
type glmEventKind int

const (
	glmName  glmEventKind = iota // text: the function name
	glmOpen                      // key: a streamed value starts
	glmChunk                     // text: more of the streamed value
	glmPair                      // key, text: a whole argument (raw value)
)

type glmEvent struct {
	kind      glmEventKind
	key, text string
}

// glmRegion parses the inside of one <tool_call>…</tool_call> as text
// arrives. It reproduces the regular expressions of vLLM's GLM parsers
// (name: the first line, or up to the first <arg_key> for GLM-4.7;
// arguments: <arg_key>(.*?)</arg_key>SEP<arg_value>(.*?)</arg_value>, found
// left to right) with resumable scans, so the whole region is read in time
// linear in its length however it is cut into pieces. A match found in a
// prefix of the region is the match of the whole region: the lazy key can
// only grow when no later </arg_value> exists, and then no later pair
// matches either.
type glmRegion struct {
	glm47    bool
	inner    string // the region's text so far
	complete bool   // the region's end was seen (or the text ended)

	nameDone   bool
	nameSearch int
	name       string
	skip       bool // no name: not a call
	done       bool // complete and fully consumed

	pos int // where the next argument is looked for

	keyStart  int // offset of the "<arg_key>" being matched, -1 if none yet
	keySearch int // where to look for that "<arg_key>"
	candidate int // where to look for the next "</arg_key>" candidate
	sepPos    int // separator scan position after the current candidate, -1 if none
	keyEnd    int // offset of the current candidate "</arg_key>"

	key       string
	valStart  int // offset of the value being read, -1 if none
	valSearch int
	valSent   int // offset up to which a streamed value was handed out
	streaming bool
}

func newGLMRegion(glm47 bool) *glmRegion {
	return &glmRegion{glm47: glm47, keyStart: -1, sepPos: -1, valStart: -1}
}

// advance consumes what it can of r.inner and appends the events found.
// stream decides whether a key's value is handed out piece by piece.
func (r *glmRegion) advance(ev []glmEvent, stream func(key string) bool) []glmEvent {
	if r.done || r.skip {
		return ev
	}
	if !r.nameDone {
		term := "\n"
		if r.glm47 {
			term = glmKeyStart
		}
		i := indexFrom(r.inner, term, r.nameSearch)
		switch {
		case i >= 0:
			r.nameDone = true
			name := pyStrip(r.inner[:i])
			r.name = name
			r.pos = i
			if !r.glm47 {
				r.pos = i + 1
			}
			if name == "" {
				r.skip = true
				return ev
			}
			ev = append(ev, glmEvent{kind: glmName, text: name})
		case r.complete && r.glm47:
			r.nameDone = true
			r.pos = len(r.inner)
			if name := pyStrip(r.inner); name != "" {
				r.name = name
				ev = append(ev, glmEvent{kind: glmName, text: name})
			} else {
				r.skip = true
			}
			return ev
		case r.complete:
			r.skip = true // GLM-4.5's pattern needs the newline after the name
			return ev
		default:
			r.nameSearch = max(0, len(r.inner)-len(term)+1)
			return ev
		}
		r.keySearch = r.pos
	}
	for {
		if r.valStart >= 0 {
			var more bool
			if ev, more = r.readValue(ev); !more {
				return ev
			}
			continue
		}
		if !r.matchKey() {
			if r.complete {
				r.done = true
			}
			return ev
		}
		r.streaming = stream(r.key)
		if r.streaming {
			ev = append(ev, glmEvent{kind: glmOpen, key: r.key})
		}
	}
}

// readValue looks for the end of the current value. It reports whether the
// value ended (so the next argument can be looked for).
func (r *glmRegion) readValue(ev []glmEvent) ([]glmEvent, bool) {
	end := -1
	if i := indexFrom(r.inner, glmValEnd, r.valSearch); i >= 0 {
		end = i
	} else if r.complete {
		end = len(r.inner) // unterminated at the region's end: the rest is the value
	}
	if end >= 0 {
		if r.streaming && r.valSent < end {
			ev = append(ev, glmEvent{kind: glmChunk, text: r.inner[r.valSent:end]})
		}
		ev = append(ev, glmEvent{kind: glmPair, key: r.key, text: r.inner[r.valStart:end]})
		r.pos = min(len(r.inner), end+len(glmValEnd))
		r.valStart, r.keyStart, r.keySearch = -1, -1, r.pos
		if end == len(r.inner) {
			r.done = true
			return ev, false
		}
		return ev, true
	}
	r.valSearch = max(r.valStart, len(r.inner)-len(glmValEnd)+1)
	if r.streaming {
		rest := r.inner[r.valStart:]
		safe := len(r.inner) - max(overlap(rest, glmValEnd), overlap(rest, glmCallEnd))
		safe = wholeRunes(r.inner, r.valSent, safe)
		if safe > r.valSent {
			ev = append(ev, glmEvent{kind: glmChunk, text: r.inner[r.valSent:safe]})
			r.valSent = safe
		}
	}
	return ev, false
}

// matchKey advances the key match <arg_key>(.*?)</arg_key>SEP<arg_value>.
// It reports whether a key was matched (r.key, r.valStart set).
func (r *glmRegion) matchKey() bool {
	if r.keyStart < 0 {
		i := indexFrom(r.inner, glmKeyStart, r.keySearch)
		if i < 0 {
			r.keySearch = max(r.keySearch, len(r.inner)-len(glmKeyStart)+1)
			return false
		}
		r.keyStart = i
		r.candidate = r.keyStart + len(glmKeyStart)
		r.sepPos = -1
	}
	for {
		if r.sepPos < 0 {
			i := indexFrom(r.inner, glmKeyEnd, r.candidate)
			if i < 0 {
				r.candidate = max(r.candidate, len(r.inner)-len(glmKeyEnd)+1)
				return false
			}
			r.keyEnd = i
			r.sepPos = r.keyEnd + len(glmKeyEnd)
		}
		switch r.scanSeparator() {
		case sepMatched:
			r.key = pyStrip(r.inner[r.keyStart+len(glmKeyStart) : r.keyEnd])
			r.valStart = r.sepPos + len(glmValStart)
			r.valSearch, r.valSent = r.valStart, r.valStart
			r.sepPos = -1
			return true
		case sepWait:
			return false
		case sepFailed:
			r.candidate = r.keyEnd + 1
			r.sepPos = -1
		}
	}
}

type sepResult int

const (
	sepMatched sepResult = iota
	sepWait
	sepFailed
)

// scanSeparator skips the separator between </arg_key> and <arg_value>
// (whitespace; for GLM-4.7 also the two characters `\n`) from r.sepPos and
// checks that <arg_value> follows.
func (r *glmRegion) scanSeparator() sepResult {
	s := r.inner
	for r.sepPos < len(s) {
		if r.glm47 && s[r.sepPos] == '\\' {
			if r.sepPos+1 >= len(s) {
				break // a lone backslash at the end may become `\n`
			}
			if s[r.sepPos+1] == 'n' {
				r.sepPos += 2
				continue
			}
		}
		if !utf8.FullRuneInString(s[r.sepPos:]) {
			break
		}
		c, w := utf8.DecodeRuneInString(s[r.sepPos:])
		if !pyWhitespace(c) {
			break
		}
		r.sepPos += w
	}
	rest := s[r.sepPos:]
	switch {
	case strings.HasPrefix(rest, glmValStart):
		return sepMatched
	case !r.complete && strings.HasPrefix(glmValStart, rest):
		return sepWait
	case !r.complete && len(rest) > 0 && (rest[0] == '\\' || !utf8.FullRuneInString(rest)) && len(rest) < 4:
		return sepWait
	}
	return sepFailed
}

// glmStream is the streaming GLM tool-call parser.
type glmStream struct {
	glm47   bool
	schemas toolSchemas
	id      func(int) string

	regions regionScanner
	region  *glmRegion
	calls   int
	// the call being streamed
	named       bool
	index       int
	argsStarted bool
	events      []glmEvent
}

func (g *glmStream) feed(text string, final bool, d *Delta) {
	g.regions.feed(text, final, &d.Content, func() {
		g.region = newGLMRegion(g.glm47)
		g.named, g.argsStarted = false, false
	}, func(inner string, complete bool) {
		r := g.region
		r.inner, r.complete = inner, complete
		g.emit(d)
		if complete {
			if g.named {
				g.appendArgs(d, g.closeArgs())
			}
			g.region = nil
		}
	})
}

// emit turns the region's new events into deltas.
func (g *glmStream) emit(d *Delta) {
	r := g.region
	g.events = r.advance(g.events[:0], func(key string) bool { return g.schemas.isStringArg(r.name, key) })
	for _, e := range g.events {
		switch e.kind {
		case glmName:
			g.named, g.index = true, g.calls
			g.calls++
			d.ToolCalls = append(d.ToolCalls, ToolCallDelta{Index: g.index, ID: g.id(g.index), Name: e.text})
		case glmOpen:
			g.appendArgs(d, string(append(g.argPrefix(nil, e.key), '"')))
		case glmChunk:
			g.appendArgs(d, string(appendJSONStringBody(nil, e.text)))
		case glmPair:
			if g.schemas.isStringArg(r.name, e.key) {
				g.appendArgs(d, `"`)
				continue
			}
			g.appendArgs(d, string(appendJSON(g.argPrefix(nil, e.key), glmDeserialize(e.text))))
		}
	}
}

// argPrefix appends `{"key": ` or `, "key": `.
func (g *glmStream) argPrefix(b []byte, key string) []byte {
	if g.argsStarted {
		b = append(b, ", "...)
	} else {
		b = append(b, '{')
		g.argsStarted = true
	}
	b = appendJSONString(b, key)
	return append(b, ": "...)
}

func (g *glmStream) closeArgs() string {
	if g.argsStarted {
		return "}"
	}
	return "{}"
}

// appendArgs adds an arguments fragment to the current call's delta.
func (g *glmStream) appendArgs(d *Delta, frag string) {
	if frag == "" {
		return
	}
	if n := len(d.ToolCalls); n > 0 && d.ToolCalls[n-1].Index == g.index {
		d.ToolCalls[n-1].Arguments += frag
		return
	}
	d.ToolCalls = append(d.ToolCalls, ToolCallDelta{Index: g.index, Arguments: frag})
}

// glmDeserialize types a non-string argument: JSON, then a Python literal,
// then the text itself.
func glmDeserialize(raw string) value {
	s := pyStrip(raw)
	if v, err := jsonLoads(s); err == nil && finiteJSON(v) {
		return v
	}
	if v, err := pyLiteral(s); err == nil {
		return v
	}
	return s
}

// parse is the non-streaming extraction: every complete
// <tool_call>…</tool_call>, and the content before the first one (null
// when empty or only whitespace).
func (g *glmStream) parse(text string) (*string, []ToolCall) {
	var calls []ToolCall
	for rest := text; ; {
		i := strings.Index(rest, glmCallStart)
		if i < 0 {
			break
		}
		rest = rest[i+len(glmCallStart):]
		j := strings.Index(rest, glmCallEnd)
		if j < 0 {
			break
		}
		r := newGLMRegion(g.glm47)
		r.inner, r.complete = rest[:j], true
		rest = rest[j+len(glmCallEnd):]
		var name string
		args := newObject()
		for _, e := range r.advance(nil, func(string) bool { return false }) {
			switch e.kind {
			case glmName:
				name = e.text
			case glmPair:
				if g.schemas.isStringArg(name, e.key) {
					args.set(e.key, e.text)
				} else {
					args.set(e.key, glmDeserialize(e.text))
				}
			}
		}
		if name == "" {
			continue
		}
		calls = append(calls, ToolCall{ID: g.id(len(calls)), Name: name, Arguments: string(appendJSON(nil, args))})
	}
	if len(calls) == 0 {
		return &text, nil
	}
	content := text[:strings.Index(text, glmCallStart)]
	if pyStrip(content) == "" {
		return nil, calls
	}
	return &content, calls
}

// indexFrom is strings.Index from offset from (clamped to s), as an offset
// into s.
func indexFrom(s, sub string, from int) int {
	from = min(max(from, 0), len(s))
	if i := strings.Index(s[from:], sub); i >= 0 {
		return from + i
	}
	return -1
}

// wholeRunes moves end back so that s[from:end] does not end inside a
// UTF-8 sequence that later bytes could complete (streamed string values
// are JSON-escaped per character).
func wholeRunes(s string, from, end int) int {
	for back := 1; back <= utf8.UTFMax-1 && end-back >= from; back++ {
		c := s[end-back]
		if c < utf8.RuneSelf {
			return end
		}
		if utf8.RuneStart(c) {
			if utf8.FullRuneInString(s[end-back : end]) {
				return end
			}
			return end - back
		}
	}
	return end
}
