// Package grammar is cpmla's structured output: it compiles a request's
// constraint (a JSON schema, any JSON object, a regular expression, a
// list of choices, or a GBNF grammar) once, and then tells, at every
// decoding step, which tokens of the model's vocabulary keep the output
// inside the constraint, so that the sampler can mask all others.
//
// Compilation (Compile) turns the constraint into rules (JSON Schema
// keywords become expressions over the JSON text; see jsonschema.go and
// jsoncodegen.go for what is generated and what is refused), each rule
// into a minimal DFA over bytes whose edges may call other rules (a
// pushdown automaton), and then walks the vocabulary's byte trie from
// every state the output can stand in, recording the tokens the state
// accepts whatever the stack below it holds, and the tokens that leave
// the state's rule and so depend on that stack. Those per-state masks are
// cached per vocabulary under a structural key, so the rules most grammars
// share (JSON strings, numbers, free values) are walked once per process;
// within a grammar, a state that no string of up to k bytes tells apart
// from one computed before it (the many states of a counted repetition)
// takes that state's tokens of up to k bytes and walks only the longer
// ones. A Compiler keeps a server's recent grammars within a byte budget.
//
// A Matcher follows one sequence: Accept advances over a token (all its
// bytes, across rule and JSON-token boundaries), FillMask writes the
// allowed-token bitset (the union of the masks of the stacks' top states,
// plus the open tokens checked against the whole stack, cached while the
// stacks stay the same), CanEnd and Complete tell whether an end token
// may or must come next, and Rollback / AcceptDraft undo and check the
// draft tokens of a speculative step. End tokens (EOS, stop ids) are
// allowed exactly where the grammar may end.
//
// Invariants:
//   - A token is in the mask exactly when Accept would take it; the tests
//     compare both over the whole vocabulary.
//   - Every state of a compiled grammar can reach the end, so a sequence
//     that follows its masks can always be completed.
//   - Every output a grammar compiled from a JSON schema allows validates
//     against the schema; a keyword the grammar cannot enforce is refused
//     with an *Error naming it, never approximated by a larger language.
//   - Compilation is bounded by Limits (input bytes, rules, automaton
//     states, mask steps and bytes, wall time) and refuses with the limit
//     named; a Matcher's stack depth is bounded by Limits.MaxStackDepth.
//
// The package must never allocate in FillMask, Accept or Rollback once a
// matcher's buffers have grown to its sequence (the masks are computed at
// compile time), never read global state other than the vocabulary's
// mask cache (safe for concurrent use), and never let a grammar's
// language grow past its constraint to make compilation cheaper: where
// an exact construction is too costly it generates a documented subset
// (property order, canonical escapes in strings a pattern, format or enum
// constrains, bounded number digits and format lengths, extra property
// names that differ from listed ones in their first character). Global
// state: the vocabulary's mask cache, and SharedVocab's vocabularies.
package grammar
