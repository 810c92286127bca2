package grammar

import (
	"errors"
	"fmt"
)

// Error is a constraint the compiler refuses. Its message names what was
// refused (a JSON Schema keyword with its location, a regular-expression or
// grammar construct, or a limit with its value) and what works instead.
type Error struct {
	// Keyword is the JSON Schema keyword, regex construct or grammar
	// construct that cannot be enforced; empty for syntax errors and limits.
	Keyword string
	// Limit names the limit that was exceeded (a Limits field); empty
	// otherwise.
	Limit   string
	msg     string
	wrapped error
}

func (e *Error) Error() string { return e.msg }

func refuse(keyword, format string, args ...any) *Error {
	return &Error{Keyword: keyword, msg: fmt.Sprintf(format, args...)}
}

func syntaxError(format string, args ...any) *Error {
	return &Error{msg: fmt.Sprintf(format, args...)}
}

func limitError(limit string, format string, args ...any) *Error {
	return &Error{Limit: limit, msg: fmt.Sprintf(format, args...) + " [grammar limit " + limit + "]"}
}

// ErrUnsatisfiable is wrapped by the *Error of a constraint no output can
// satisfy (a false schema, an empty enum, contradicting keywords).
var ErrUnsatisfiable = errors.New("the constraint matches no output")

// Unwrap makes errors.Is see ErrUnsatisfiable.
func (e *Error) Unwrap() error { return e.wrapped }

// ErrDeadEnd is returned (wrapped) by Matcher.Accept for a token the
// grammar does not allow next.
var ErrDeadEnd = errors.New("token not allowed by the grammar")

// ErrTooDeep is returned (wrapped) by Matcher.Accept when a token would
// nest the output deeper than Limits.MaxStackDepth.
var ErrTooDeep = errors.New("output nested deeper than the grammar's stack limit")

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
