package jinja

import (
	"fmt"
	"strings"
)

// A chunk is a piece of template source: literal text, an output tag
// ({{ … }}) or a statement tag ({% … %}). Comments are dropped while
// chunking.
type chunk struct {
	kind chunkKind
	body string // text, or the inside of the tag without delimiters
	pos  int    // byte offset of the chunk in the source
}

type chunkKind int

const (
	chunkText chunkKind = iota
	chunkOutput
	chunkStatement
)

// chunkSource cuts src into chunks and applies whitespace control:
// "-" next to a delimiter strips all whitespace on that side, lstrip_blocks
// removes spaces and tabs between the start of a line and a statement or
// comment tag (unless the tag opens with "+"), and trim_blocks removes the
// first newline after a statement or comment tag.
func chunkSource(src string) ([]chunk, error) {
	var chunks []chunk
	trimNextText := false // strip leading whitespace of the next text (after "-%}")
	trimNewline := false  // drop one leading newline of the next text (trim_blocks)
	pos := 0
	for pos <= len(src) {
		open := indexTagOpen(src, pos)
		textEnd := open
		if open < 0 {
			textEnd = len(src)
		}
		text := src[pos:textEnd]
		if trimNextText {
			text = strings.TrimLeft(text, " \t\n\r\f\v")
		} else if trimNewline {
			text = strings.TrimPrefix(text, "\n")
			text = strings.TrimPrefix(text, "\r\n")
		}
		trimNextText, trimNewline = false, false
		if open < 0 {
			if text != "" {
				chunks = append(chunks, chunk{chunkText, text, pos})
			}
			break
		}
		kindByte := src[open+1]
		inner := open + 2
		stripBefore := false
		noLstrip := false
		if inner < len(src) && src[inner] == '-' {
			stripBefore = true
			inner++
		} else if inner < len(src) && src[inner] == '+' {
			noLstrip = true
			inner++
		}
		if stripBefore {
			text = strings.TrimRight(text, " \t\n\r\f\v")
		} else if kindByte != '{' && !noLstrip {
			// lstrip_blocks: only when the tag is the first thing on its line.
			lineStart := strings.LastIndexByte(src[:open], '\n') + 1
			if strings.Trim(src[lineStart:open], " \t") == "" {
				text = strings.TrimRight(text, " \t")
			}
		}
		if text != "" {
			chunks = append(chunks, chunk{chunkText, text, pos})
		}
		var closeDelim string
		switch kindByte {
		case '{':
			closeDelim = "}}"
		case '%':
			closeDelim = "%}"
		case '#':
			closeDelim = "#}"
		}
		end, stripAfter, err := findTagClose(src, inner, closeDelim)
		if err != nil {
			return nil, fmt.Errorf("tag at offset %d: %w", open, err)
		}
		bodyEnd := end
		if stripAfter {
			bodyEnd--
		}
		body := src[inner:bodyEnd]
		switch kindByte {
		case '{':
			chunks = append(chunks, chunk{chunkOutput, body, open})
		case '%':
			chunks = append(chunks, chunk{chunkStatement, body, open})
			trimNewline = true
		case '#':
			trimNewline = true
		}
		if stripAfter {
			trimNextText = true
		}
		pos = end + len(closeDelim)
	}
	return chunks, nil
}

// indexTagOpen returns the offset of the next "{{", "{%" or "{#" at or after
// pos, or -1.
func indexTagOpen(src string, pos int) int {
	for i := pos; i+1 < len(src); i++ {
		if src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#') {
			return i
		}
	}
	return -1
}

// findTagClose finds the closing delimiter of a tag whose inside starts at
// pos, skipping string literals (comments have none). It returns the offset
// of the delimiter and whether it was preceded by "-".
func findTagClose(src string, pos int, closeDelim string) (int, bool, error) {
	var quote byte
	for i := pos; i < len(src); i++ {
		c := src[i]
		if closeDelim != "#}" {
			if quote != 0 {
				if c == '\\' {
					i++
				} else if c == quote {
					quote = 0
				}
				continue
			}
			if c == '\'' || c == '"' {
				quote = c
				continue
			}
		}
		if strings.HasPrefix(src[i:], closeDelim) {
			return i, i > pos && src[i-1] == '-', nil
		}
	}
	return 0, false, fmt.Errorf("missing %q", closeDelim)
}
