package tokenizer

import (
	"encoding/json"
	"fmt"

	"golang.org/x/text/unicode/norm"
)

// normalizer is the normalizer stage of tokenizer.json: the Unicode
// normalization forms, alone or in a Sequence (Qwen2/3 use NFC). It maps
// a text segment to the text the pre-tokenizer sees.
type normalizer []norm.Form

func (n normalizer) apply(s string) string {
	for _, f := range n {
		s = f.String(s)
	}
	return s
}

// expansion bounds how much normalization can shrink a text, so that
// len(text)/expansion bytes still reach the pre-tokenizer: composition
// (NFC, NFKC) joins at most three encoded characters into one (a Hangul
// syllable from its jamo).
func (n normalizer) shrink() int {
	if len(n) == 0 {
		return 1
	}
	return 3
}

var normalForms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}

// buildNormalizer reads a normalizer entry: null, NFC, NFD, NFKC, NFKD or a
// Sequence of them.
func buildNormalizer(raw json.RawMessage, depth int) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	if depth > 8 {
		return nil, fmt.Errorf("normalizer Sequences nested deeper than 8")
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	if f, ok := normalForms[c.Type]; ok {
		return normalizer{f}, nil
	}
	if c.Type != "Sequence" {
		return nil, fmt.Errorf("normalizer %q is not supported (supported: null, NFC, NFD, NFKC, NFKD and Sequences of them)", c.Type)
	}
	var out normalizer
	for i, sub := range c.Normalizers {
		n, err := buildNormalizer(sub, depth+1)
		if err != nil {
			return nil, fmt.Errorf("normalizer %d: %w", i, err)
		}
		out = append(out, n...)
	}
	return out, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
