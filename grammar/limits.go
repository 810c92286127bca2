package grammar

import "time"

// Limits bound what one constraint may cost to compile and to run. A
// constraint that exceeds one is refused with an *Error naming the field
// and its value, before any request runs with it.
type Limits struct {
	// MaxSpecBytes bounds the text of a schema, regex, grammar or the
	// choices together.
	MaxSpecBytes int
	// MaxRules bounds the rules of the compiled grammar (a JSON schema
	// makes one per schema it names, a GBNF grammar one per rule).
	MaxRules int
	// MaxRuleNFAStates bounds the NFA one rule compiles to (counted
	// repetitions are expanded: maxLength 1000 costs a thousand copies).
	MaxRuleNFAStates int
	// MaxStates bounds the DFA states of all rules together.
	MaxStates int
	// MaxMaskSteps bounds the parser steps spent computing the token
	// masks of every grammar state at compile time (one step is one byte
	// of one vocabulary token walked through the grammar).
	MaxMaskSteps int64
	// MaxMaskBytes bounds the memory the token masks take.
	MaxMaskBytes int64
	// MaxCompileTime bounds the wall time of one compilation.
	MaxCompileTime time.Duration
	// MaxStackDepth bounds how deeply an output may nest rules (JSON
	// nesting costs two to three frames a level); a token that would go
	// deeper ends the sequence with ErrTooDeep.
	MaxStackDepth int
	// MaxSchemaDepth bounds the nesting of a JSON schema document and of
	// the subschemas compilation expands.
	MaxSchemaDepth int
	// MaxAlternatives bounds the alternatives a JSON schema expands to
	// when allOf is distributed over anyOf/oneOf/type lists.
	MaxAlternatives int
}

// DefaultLimits are the limits the server compiles request constraints
// with.
func DefaultLimits() Limits {
	return Limits{
		MaxSpecBytes:     1 << 20,
		MaxRules:         4096,
		MaxRuleNFAStates: 200_000,
		MaxStates:        100_000,
		MaxMaskSteps:     40_000_000,
		MaxMaskBytes:     256 << 20,
		MaxCompileTime:   10 * time.Second,
		MaxStackDepth:    2048,
		MaxSchemaDepth:   64,
		MaxAlternatives:  256,
	}
}
