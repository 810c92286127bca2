package grammar

import (
	"fmt"
	"strings"
	"time"
)

// Kind is the kind of constraint a request gives.
type Kind uint8

const (
	// KindJSONSchema: Spec.Text is a JSON Schema; the output is one JSON
	// value that validates against it.
	KindJSONSchema Kind = iota + 1
	// KindJSONObject: the output is one JSON object (vLLM's json_object,
	// the schema {"type":"object"}).
	KindJSONObject
	// KindRegex: the whole output matches the regular expression Spec.Text.
	KindRegex
	// KindChoice: the output is exactly one of Spec.Choices.
	KindChoice
	// KindGrammar: Spec.Text is a GBNF grammar; the output matches its
	// rule root.
	KindGrammar
)

func (k Kind) String() string {
	switch k {
	case KindJSONSchema:
		return "json_schema"
	case KindJSONObject:
		return "json_object"
	case KindRegex:
		return "regex"
	case KindChoice:
		return "choice"
	case KindGrammar:
		return "grammar"
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Spec is one request's constraint.
type Spec struct {
	Kind    Kind
	Text    string
	Choices []string
	// JSON options (vLLM's structured_outputs options).
	//
	// NoWhitespace (disable_any_whitespace) writes JSON without any
	// whitespace between tokens; WhitespacePattern (whitespace_pattern)
	// is a regex for the whitespace allowed between tokens instead of the
	// default [ \t\n\r]*.
	NoWhitespace      bool
	WhitespacePattern string
	// NoAdditionalProperties (disable_additional_properties) generates no
	// property a schema does not name unless its additionalProperties
	// allows them explicitly; without it, objects whose schema lists no
	// properties at all take any properties.
	NoAdditionalProperties bool
}

// key identifies the spec in the compiled-grammar cache.
func (s Spec) key() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d|%v|%v|%q|", s.Kind, s.NoWhitespace, s.NoAdditionalProperties, s.WhitespacePattern)
	if s.Kind == KindChoice {
		for _, c := range s.Choices {
			fmt.Fprintf(&sb, "%q,", c)
		}
	}
	sb.WriteString(s.Text)
	return sb.String()
}

// Compile compiles spec for vocabulary v: it builds the automaton and the
// token masks of every state, within lim. A constraint that cannot be
// enforced or that exceeds a limit returns an *Error.
func Compile(spec Spec, v *Vocab, lim Limits) (*Grammar, error) {
	start := time.Now()
	size := len(spec.Text) + len(spec.WhitespacePattern)
	for _, c := range spec.Choices {
		size += len(c)
	}
	if size > lim.MaxSpecBytes {
		return nil, limitError("MaxSpecBytes", "the %s constraint has %d bytes, more than %d (the limit)", spec.Kind, size, lim.MaxSpecBytes)
	}
	a, err := buildAutomaton(spec, lim)
	if err != nil {
		return nil, err
	}
	return newGrammar(a, v, lim, start)
}

func buildAutomaton(spec Spec, lim Limits) (*automaton, error) {
	switch spec.Kind {
	case KindRegex:
		return compileRegex(spec.Text, lim)
	case KindChoice:
		return compileChoice(spec.Choices, lim)
	case KindGrammar:
		return compileGBNF(spec.Text, lim)
	case KindJSONSchema:
		return compileJSONSchema(spec.Text, spec, lim)
	case KindJSONObject:
		return compileJSONSchema(`{"type":"object"}`, spec, lim)
	}
	return nil, fmt.Errorf("grammar: unknown constraint kind %d", spec.Kind)
}

// compileRegex: the whole output matches src.
func compileRegex(src string, lim Limits) (*automaton, error) {
	n, err := parseRegex(src)
	if err != nil {
		return nil, err
	}
	e, err := regexLanguage(src, n, utf8Expr, nil, false)
	if err != nil {
		return nil, err
	}
	b := newBuilder(lim)
	root, err := b.rule("root")
	if err != nil {
		return nil, err
	}
	b.define(root, e)
	return b.build(root)
}

// compileChoice: the output is one of choices.
func compileChoice(choices []string, lim Limits) (*automaton, error) {
	if len(choices) == 0 {
		return nil, syntaxError("the choice list is empty; give at least one choice")
	}
	alts := make([]*expr, len(choices))
	for i, c := range choices {
		if c == "" {
			return nil, syntaxError("choice %d is the empty string; every choice needs at least one character", i)
		}
		alts[i] = lit(c)
	}
	b := newBuilder(lim)
	root, err := b.rule("root")
	if err != nil {
		return nil, err
	}
	b.define(root, alt(alts...))
	return b.build(root)
}
