package chatparse

import "strings"

// regionScanner splits streamed text at start…end delimiters. The text
// outside every region is content, handed out as soon as it cannot be the
// beginning of a start delimiter; the text inside a region is handed out
// whole, as far as it has arrived, each time more of it arrives. The end
// delimiter is looked for only in what is new (and the few bytes before it
// that could begin it), so a region costs time linear in its length
// however its text is cut into pieces.
type regionScanner struct {
	start, end string

	pending   string
	inside    bool
	buf       strings.Builder // the region's text so far; String aliases its bytes
	endSearch int             // where in that text the end delimiter is looked for next
}

// feed takes the next piece of text (final: the last piece). It appends
// content to *content, calls open where a region starts, and calls region
// with the region's text so far each time it grows; complete says the
// region is over: its end delimiter was seen, or the text ended inside it.
func (r *regionScanner) feed(text string, final bool, content *string, open func(), region func(text string, complete bool)) {
	r.pending += text
	for {
		if !r.inside {
			if i := strings.Index(r.pending, r.start); i >= 0 {
				*content += r.pending[:i]
				r.pending = r.pending[i+len(r.start):]
				r.inside, r.endSearch, r.buf = true, 0, strings.Builder{}
				open()
				continue
			}
			hold := 0
			if !final {
				hold = overlap(r.pending, r.start)
			}
			*content += r.pending[:len(r.pending)-hold]
			r.pending = r.pending[len(r.pending)-hold:]
			return
		}
		r.buf.WriteString(r.pending)
		r.pending = ""
		inner := r.buf.String()
		i := indexFrom(inner, r.end, r.endSearch)
		if i < 0 {
			r.endSearch = max(0, len(inner)-len(r.end)+1)
			r.inside = !final
			region(inner, final)
			return
		}
		r.pending = inner[i+len(r.end):]
		r.inside = false
		region(inner[:i], true)
	}
}
