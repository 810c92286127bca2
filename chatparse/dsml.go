package chatparse

import (
	"strings"
	"unicode/utf8"
)

// The DeepSeek-V3.2 tool-call format (DSML):
//
//	<｜DSML｜function_calls>
//	<｜DSML｜invoke name="get_weather">
//	<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//	<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//	</｜DSML｜invoke>
//	</｜DSML｜function_calls>
const (
	dsmlBlockStart = "<｜DSML｜function_calls>"
	dsmlBlockEnd   = "</｜DSML｜function_calls>"
	dsmlInvoke     = "<｜DSML｜invoke"
	dsmlInvokeEnd  = "</｜DSML｜invoke>"
	dsmlParam      = "<｜DSML｜parameter"
	dsmlParamEnd   = "</｜DSML｜parameter>"
)

type matchResult int

const (
	matchOK matchResult = iota
	matchWait
	matchFail
)

// tagMatcher matches the opening tags
// <｜DSML｜invoke\s+name="([^"]+)"\s*> and
// <｜DSML｜parameter\s+name="([^"]+)"\s+string="(true|false)"\s*> on text
// that may still be growing: matchWait means the text ended before the
// pattern was decided.
type tagMatcher struct {
	s        string
	i        int
	complete bool
}

func (m *tagMatcher) end() matchResult {
	if m.complete {
		return matchFail
	}
	return matchWait
}

// lit expects a literal.
func (m *tagMatcher) lit(l string) matchResult {
	rest := m.s[m.i:]
	if strings.HasPrefix(rest, l) {
		m.i += len(l)
		return matchOK
	}
	if strings.HasPrefix(l, rest) {
		return m.end()
	}
	return matchFail
}

// spaces skips whitespace; at least one when need is set.
func (m *tagMatcher) spaces(need bool) matchResult {
	n := 0
	for m.i < len(m.s) {
		if !utf8.FullRuneInString(m.s[m.i:]) {
			return m.end()
		}
		r, w := utf8.DecodeRuneInString(m.s[m.i:])
		if !pyWhitespace(r) {
			break
		}
		m.i += w
		n++
	}
	if m.i == len(m.s) {
		return m.end()
	}
	if need && n == 0 {
		return matchFail
	}
	return matchOK
}

// quoted reads "([^"]+)" after the opening quote was matched.
func (m *tagMatcher) quoted() (string, matchResult) {
	j := strings.IndexByte(m.s[m.i:], '"')
	if j < 0 {
		return "", m.end()
	}
	if j == 0 {
		return "", matchFail
	}
	v := m.s[m.i : m.i+j]
	m.i += j + 1
	return v, matchOK
}

// matchInvokeOpen matches an invoke tag at s[i:] (which starts with
// dsmlInvoke); it returns the end offset and the function name.
func matchInvokeOpen(s string, i int, complete bool) (matchResult, int, string) {
	m := tagMatcher{s: s, i: i + len(dsmlInvoke), complete: complete}
	if r := m.spaces(true); r != matchOK {
		return r, 0, ""
	}
	if r := m.lit(`name="`); r != matchOK {
		return r, 0, ""
	}
	name, r := m.quoted()
	if r != matchOK {
		return r, 0, ""
	}
	if r := m.spaces(false); r != matchOK {
		return r, 0, ""
	}
	if r := m.lit(">"); r != matchOK {
		return r, 0, ""
	}
	return matchOK, m.i, name
}

// matchParamOpen matches a parameter tag at s[i:] (which starts with
// dsmlParam); it returns the end offset, the name and the string flag.
func matchParamOpen(s string, i int, complete bool) (matchResult, int, string, bool) {
	m := tagMatcher{s: s, i: i + len(dsmlParam), complete: complete}
	if r := m.spaces(true); r != matchOK {
		return r, 0, "", false
	}
	if r := m.lit(`name="`); r != matchOK {
		return r, 0, "", false
	}
	name, r := m.quoted()
	if r != matchOK {
		return r, 0, "", false
	}
	if r := m.spaces(true); r != matchOK {
		return r, 0, "", false
	}
	if r := m.lit(`string="`); r != matchOK {
		return r, 0, "", false
	}
	flag, r := m.quoted()
	if r != matchOK {
		return r, 0, "", false
	}
	if flag != "true" && flag != "false" {
		return matchFail, 0, "", false
	}
	if r := m.spaces(false); r != matchOK {
		return r, 0, "", false
	}
	if r := m.lit(">"); r != matchOK {
		return r, 0, "", false
	}
	return matchOK, m.i, name, flag == "true"
}

type dsmlEventKind int

const (
	dsmlName       dsmlEventKind = iota // text: an invoke's function name
	dsmlOpen                            // key: a streamed string parameter starts
	dsmlChunk                           // text: more of it
	dsmlParamDone                       // key, text, str; closed: its end tag was seen
	dsmlInvokeDone                      // closed: the invoke's end tag was seen
)

type dsmlEvent struct {
	kind      dsmlEventKind
	key, text string
	str       bool
	closed    bool
}

// dsmlBlock parses the inside of one function_calls block as it grows, as
// vLLM's regular expressions read it: invokes found left to right, each
// ending at the first </｜DSML｜invoke>, parameters inside an invoke found
// left to right, each ending at the first </｜DSML｜parameter>. Scans
// resume where they stopped, so a block is read in linear time.
type dsmlBlock struct {
	text     string // the block's text so far
	complete bool

	pos        int // where the next invoke is looked for
	inInvoke   bool
	invokeEnd  int // offset of the invoke's end tag, -1 while unknown
	endSearch  int
	ppos       int // where the next parameter is looked for
	inParam    bool
	paramName  string
	paramStr   bool
	valStart   int
	valSearch  int
	valSent    int
	streaming  bool
	invokeName string
}

func (b *dsmlBlock) limit() int {
	if b.invokeEnd >= 0 {
		return b.invokeEnd
	}
	return len(b.text)
}

// advance consumes what it can and appends the events found. stream
// decides whether a string parameter is handed out piece by piece.
func (b *dsmlBlock) advance(ev []dsmlEvent, stream func(key string) bool) []dsmlEvent {
	for {
		if !b.inInvoke {
			i := indexFrom(b.text, dsmlInvoke, b.pos)
			if i < 0 {
				b.pos = max(b.pos, len(b.text)-len(dsmlInvoke)+1)
				return ev
			}
			at := i
			r, end, name := matchInvokeOpen(b.text, at, b.complete)
			switch r {
			case matchWait:
				b.pos = at
				return ev
			case matchFail:
				b.pos = at + 1
				continue
			}
			b.inInvoke, b.invokeName = true, name
			b.invokeEnd, b.endSearch, b.ppos = -1, end, end
			ev = append(ev, dsmlEvent{kind: dsmlName, text: name})
		}
		if b.invokeEnd < 0 {
			if i := indexFrom(b.text, dsmlInvokeEnd, b.endSearch); i >= 0 {
				b.invokeEnd = i
			} else {
				b.endSearch = max(b.endSearch, len(b.text)-len(dsmlInvokeEnd)+1)
			}
		}
		var more bool
		if ev, more = b.params(ev, stream); !more {
			return ev
		}
	}
}

// params reads the parameters of the current invoke. It reports whether
// the invoke ended (so the next one can be looked for).
func (b *dsmlBlock) params(ev []dsmlEvent, stream func(string) bool) ([]dsmlEvent, bool) {
	lim := b.limit()
	ended := b.invokeEnd >= 0 || b.complete
	for {
		if b.inParam {
			scope := b.text[:lim]
			if i := indexFrom(scope, dsmlParamEnd, b.valSearch); i >= 0 {
				end := i
				if b.streaming && b.valSent < end {
					ev = append(ev, dsmlEvent{kind: dsmlChunk, text: b.text[b.valSent:end]})
				}
				ev = append(ev, dsmlEvent{kind: dsmlParamDone, key: b.paramName, text: b.text[b.valStart:end], str: b.paramStr, closed: true})
				b.inParam = false
				b.ppos = end + len(dsmlParamEnd)
				continue
			}
			if ended {
				// The invoke (or the text) ends inside the value: the
				// parameter is not complete, so it is no argument.
				if b.streaming && b.valSent < lim {
					ev = append(ev, dsmlEvent{kind: dsmlChunk, text: b.text[b.valSent:lim]})
				}
				ev = append(ev, dsmlEvent{kind: dsmlParamDone, key: b.paramName, str: b.paramStr})
				b.inParam = false
				return b.endInvoke(ev), true
			}
			b.valSearch = max(b.valStart, lim-len(dsmlParamEnd)+1)
			if b.streaming {
				rest := b.text[b.valStart:lim]
				hold := max(overlap(rest, dsmlParamEnd), overlap(rest, dsmlInvokeEnd), overlap(rest, dsmlBlockEnd))
				if safe := wholeRunes(b.text, b.valSent, lim-hold); safe > b.valSent {
					ev = append(ev, dsmlEvent{kind: dsmlChunk, text: b.text[b.valSent:safe]})
					b.valSent = safe
				}
			}
			return ev, false
		}
		at := indexFrom(b.text[:lim], dsmlParam, b.ppos)
		if at < 0 {
			if ended {
				return b.endInvoke(ev), true
			}
			b.ppos = max(b.ppos, lim-len(dsmlParam)+1)
			return ev, false
		}
		r, end, name, str := matchParamOpen(b.text[:lim], at, ended)
		switch r {
		case matchWait:
			b.ppos = at
			return ev, false
		case matchFail:
			b.ppos = at + 1
			continue
		}
		b.inParam, b.paramName, b.paramStr = true, name, str
		b.valStart, b.valSearch, b.valSent = end, end, end
		b.streaming = str && stream(name)
		if b.streaming {
			ev = append(ev, dsmlEvent{kind: dsmlOpen, key: name})
		}
	}
}

func (b *dsmlBlock) endInvoke(ev []dsmlEvent) []dsmlEvent {
	closed := b.invokeEnd >= 0
	ev = append(ev, dsmlEvent{kind: dsmlInvokeDone, closed: closed})
	b.inInvoke = false
	if closed {
		b.pos = b.invokeEnd + len(dsmlInvokeEnd)
	} else {
		b.pos = len(b.text)
	}
	return ev
}

// dsmlArgs collects one invoke's parameters and types them by the schema.
type dsmlArgs struct {
	keys []string
	raw  map[string]dsmlRaw
}

type dsmlRaw struct {
	text string
	str  bool
}

func (a *dsmlArgs) add(key, text string, str bool) {
	if a.raw == nil {
		a.raw = map[string]dsmlRaw{}
	}
	if _, ok := a.raw[key]; !ok {
		a.keys = append(a.keys, key)
	}
	a.raw[key] = dsmlRaw{text, str}
}

// object converts the parameters: string="true" values stay text, others
// are coerced to their schema types; a lone "arguments" or "input" wrapper
// that the schema does not name is unwrapped when its object fits the
// schema.
func (a *dsmlArgs) object(props map[string]any) *object {
	obj := newObject()
	for _, k := range a.keys {
		r := a.raw[k]
		if r.str {
			obj.set(k, r.text)
			continue
		}
		obj.set(k, coerce(r.text, schemaTypes(props[k])))
	}
	return unwrapArguments(obj, props)
}

func unwrapArguments(obj *object, props map[string]any) *object {
	for _, wrapper := range []string{"arguments", "input"} {
		if len(obj.keys) != 1 || obj.keys[0] != wrapper {
			continue
		}
		if _, named := props[wrapper]; named {
			continue
		}
		inner := obj.vals[wrapper]
		if s, ok := inner.(string); ok {
			v, err := jsonLoads(s)
			if err != nil {
				return obj
			}
			inner = v
		}
		if io, ok := inner.(*object); ok {
			fits := true
			for _, k := range io.keys {
				if _, ok := props[k]; !ok {
					fits = false
				}
			}
			if fits {
				return io
			}
		}
	}
	return obj
}

// dsmlStream is the streaming DeepSeek-V3.2 tool-call parser.
type dsmlStream struct {
	schemas toolSchemas
	id      func(int) string

	regions regionScanner
	block   *dsmlBlock
	calls   int
	events  []dsmlEvent

	// the invoke being streamed
	index       int
	argsStarted bool
	buffered    bool // the whole invoke is held back (a possible wrapper)
	open        bool // a string parameter is being streamed
	args        dsmlArgs
}

func (s *dsmlStream) feed(text string, final bool, d *Delta) {
	s.regions.feed(text, final, &d.Content, func() {
		s.block = &dsmlBlock{invokeEnd: -1}
	}, func(inner string, complete bool) {
		s.block.text, s.block.complete = inner, complete
		s.emit(d)
		if complete {
			s.block = nil
		}
	})
}

func (s *dsmlStream) emit(d *Delta) {
	b := s.block
	s.events = b.advance(s.events[:0], func(key string) bool {
		if s.buffered {
			return false
		}
		props := s.schemas[b.invokeName]
		if !s.argsStarted && len(props) > 0 && (key == "arguments" || key == "input") {
			if _, named := props[key]; !named {
				s.buffered = true // maybe a wrapper: decide at the invoke's end
				return false
			}
		}
		return true
	})
	for _, e := range s.events {
		switch e.kind {
		case dsmlName:
			s.index = s.calls
			s.calls++
			s.argsStarted, s.buffered, s.open, s.args = false, false, false, dsmlArgs{}
			d.ToolCalls = append(d.ToolCalls, ToolCallDelta{Index: s.index, ID: s.id(s.index), Name: e.text})
		case dsmlOpen:
			s.open = true
			s.appendArgs(d, string(append(s.argPrefix(nil, e.key), '"')))
		case dsmlChunk:
			s.appendArgs(d, string(appendJSONStringBody(nil, e.text)))
		case dsmlParamDone:
			s.paramDone(d, e)
		case dsmlInvokeDone:
			switch {
			case s.buffered:
				s.appendArgs(d, string(appendJSON(nil, s.args.object(s.schemas[b.invokeName]))))
			case s.argsStarted:
				s.appendArgs(d, "}")
			default:
				s.appendArgs(d, "{}")
			}
		}
	}
}

func (s *dsmlStream) paramDone(d *Delta, e dsmlEvent) {
	if s.open {
		s.open = false
		if e.closed {
			s.args.add(e.key, e.text, e.str)
		}
		s.appendArgs(d, `"`) // the value was streamed; close its string
		return
	}
	if !e.closed {
		return // an unterminated parameter is no argument
	}
	s.args.add(e.key, e.text, e.str)
	if s.buffered {
		return
	}
	props := s.schemas[s.block.invokeName]
	if !s.argsStarted && len(props) > 0 && (e.key == "arguments" || e.key == "input") {
		if _, named := props[e.key]; !named {
			s.buffered = true
			return
		}
	}
	var v value = e.text
	if !e.str {
		v = coerce(e.text, schemaTypes(props[e.key]))
	}
	s.appendArgs(d, string(appendJSON(s.argPrefix(nil, e.key), v)))
}

func (s *dsmlStream) argPrefix(b []byte, key string) []byte {
	if s.argsStarted {
		b = append(b, ", "...)
	} else {
		b = append(b, '{')
		s.argsStarted = true
	}
	b = appendJSONString(b, key)
	return append(b, ": "...)
}

func (s *dsmlStream) appendArgs(d *Delta, frag string) {
	if frag == "" {
		return
	}
	if n := len(d.ToolCalls); n > 0 && d.ToolCalls[n-1].Index == s.index {
		d.ToolCalls[n-1].Arguments += frag
		return
	}
	d.ToolCalls = append(d.ToolCalls, ToolCallDelta{Index: s.index, Arguments: frag})
}

// parse is the non-streaming extraction: every invoke of every complete
// function_calls block; content is the text before the first block, null
// when there is none.
func (s *dsmlStream) parse(text string) (*string, []ToolCall) {
	first := strings.Index(text, dsmlBlockStart)
	if first < 0 {
		return &text, nil
	}
	var calls []ToolCall
	for rest := text; ; {
		i := strings.Index(rest, dsmlBlockStart)
		if i < 0 {
			break
		}
		rest = rest[i+len(dsmlBlockStart):]
		j := strings.Index(rest, dsmlBlockEnd)
		if j < 0 {
			break
		}
		b := &dsmlBlock{text: rest[:j], complete: true, invokeEnd: -1}
		rest = rest[j+len(dsmlBlockEnd):]
		var name string
		var args dsmlArgs
		for _, e := range b.advance(nil, func(string) bool { return false }) {
			switch e.kind {
			case dsmlName:
				name, args = e.text, dsmlArgs{}
			case dsmlParamDone:
				if e.closed {
					args.add(e.key, e.text, e.str)
				}
			case dsmlInvokeDone:
				if !e.closed {
					continue
				}
				obj := args.object(s.schemas[name])
				calls = append(calls, ToolCall{ID: s.id(len(calls)), Name: name, Arguments: string(appendJSON(nil, obj))})
			}
		}
	}
	if len(calls) == 0 {
		return &text, nil
	}
	if first == 0 {
		return nil, calls
	}
	content := text[:first]
	return &content, calls
}
