package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/cpmla/cpmla/tokenizer"
)

// Prompt is one request of a dataset.
type Prompt struct {
	// IDs are the prompt's token ids (sent as is to /v1/completions).
	IDs []int
	// Text is IDs decoded, invalid UTF-8 replaced (sent as the user message to
	// /v1/chat/completions, where the chat template and re-tokenization
	// change the count; the server's usage then gives the real length).
	Text string
	// OutputLen is the number of tokens to ask for (max_tokens).
	OutputLen int
}

// RandomOptions describe the random dataset.
type RandomOptions struct {
	NumPrompts int
	// InputLen and OutputLen are the mean lengths; each request's length
	// is drawn uniformly from [⌊len·(1−RangeRatio)⌋, ⌈len·(1+RangeRatio)⌉]
	// and is at least 1.
	InputLen, OutputLen int
	RangeRatio          float64
	Seed                uint64
}

// Validate reports settings the dataset cannot honour.
func (o RandomOptions) Validate() error {
	switch {
	case o.NumPrompts < 1:
		return fmt.Errorf("--num-prompts is %d; use at least 1", o.NumPrompts)
	case o.InputLen < 1:
		return fmt.Errorf("--random-input-len is %d; use at least 1", o.InputLen)
	case o.OutputLen < 1:
		return fmt.Errorf("--random-output-len is %d; use at least 1", o.OutputLen)
	case !(o.RangeRatio >= 0 && o.RangeRatio < 1):
		return fmt.Errorf("--random-range-ratio is %v; use a value in [0, 1), e.g. 0", o.RangeRatio)
	}
	return nil
}

// lengthRange is the inclusive range a length is drawn from.
func lengthRange(mean int, ratio float64) (lo, hi int) {
	lo = max(1, int(math.Floor(float64(mean)*(1-ratio))))
	hi = max(lo, int(math.Ceil(float64(mean)*(1+ratio))))
	return lo, hi
}

// RandomDataset draws prompts of random ordinary tokens: each id is drawn
// uniformly from the tokenizer's ids that are neither special nor added
// tokens (so no control token such as BOS or a chat marker is sent), with
// a generator seeded by Seed: the same options give the same prompts.
func RandomDataset(tk *tokenizer.Tokenizer, o RandomOptions) ([]Prompt, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	allowed := ordinaryTokens(tk)
	if len(allowed) == 0 {
		return nil, fmt.Errorf("the tokenizer has no ordinary tokens to build random prompts from")
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x6a09e667f3bcc908))
	inLo, inHi := lengthRange(o.InputLen, o.RangeRatio)
	outLo, outHi := lengthRange(o.OutputLen, o.RangeRatio)
	prompts := make([]Prompt, o.NumPrompts)
	for i := range prompts {
		n := inLo + rng.IntN(inHi-inLo+1)
		ids := make([]int, n)
		for k := range ids {
			ids[k] = allowed[rng.IntN(len(allowed))]
		}
		// Random ids may cut characters; the text replaces such bytes
		// with U+FFFD so that it is what JSON carries.
		text := strings.ToValidUTF8(tk.Decode(ids, false), "\uFFFD")
		prompts[i] = Prompt{IDs: ids, Text: text, OutputLen: outLo + rng.IntN(outHi-outLo+1)}
	}
	return prompts, nil
}

// ordinary caches ordinaryTokens per tokenizer (the scan encodes every
// token once).
var ordinary sync.Map // *tokenizer.Tokenizer → []int

// ordinaryTokens are the ids that are neither special nor added tokens.
func ordinaryTokens(tk *tokenizer.Tokenizer) []int {
	if v, ok := ordinary.Load(tk); ok {
		return v.([]int)
	}
	var ids []int
	for id := range tk.VocabSize() {
		if s, ok := tk.Token(id); ok && s != "" && !tk.IsSpecial(id) && !isAdded(tk, id) {
			ids = append(ids, id)
		}
	}
	ordinary.Store(tk, ids)
	return ids
}

// isAdded reports whether id is an added token: its text is matched as
// that one token when control tokens are parsed, and is something else
// when they are not.
func isAdded(tk *tokenizer.Tokenizer, id int) bool {
	text := tk.Decode([]int{id}, false)
	plain := tk.EncodeWith(text, tokenizer.EncodeOptions{})
	if len(plain) == 1 && plain[0] == id {
		return false
	}
	parsed := tk.EncodeWith(text, tokenizer.EncodeOptions{ParseSpecial: true})
	return len(parsed) == 1 && parsed[0] == id
}
