package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
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
	// VocabSize, when > 0, is how many ids the served model takes: every
	// drawn id is below it (Discover reads it from the server).
	VocabSize int
}

// MaxLen bounds the mean input and output lengths: more tokens than any
// served model's context.
const MaxLen = 1 << 30

// Bytes bounds the memory the dataset of o takes (ids, text and the
// results each request keeps), so that a caller can refuse a dataset that
// cannot fit before drawing it.
func (o RandomOptions) Bytes() int64 {
	_, inHi := lengthRange(o.InputLen, o.RangeRatio)
	_, outHi := lengthRange(o.OutputLen, o.RangeRatio)
	per := float64(inHi)*(8+32) + float64(outHi)*(8+16) + 4096
	b := float64(o.NumPrompts) * per
	if b > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return int64(b)
}

// Validate reports settings the dataset cannot honour.
func (o RandomOptions) Validate() error {
	switch {
	case o.NumPrompts < 1:
		return fmt.Errorf("--num-prompts is %d; use at least 1", o.NumPrompts)
	case o.InputLen < 1 || o.InputLen > MaxLen:
		return fmt.Errorf("--random-input-len is %d; use 1 to %d", o.InputLen, MaxLen)
	case o.OutputLen < 1 || o.OutputLen > MaxLen:
		return fmt.Errorf("--random-output-len is %d; use 1 to %d", o.OutputLen, MaxLen)
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
// tokens (so no control token such as BOS or a chat marker is sent) and,
// when VocabSize is set, below it (ids the served model takes), with a
// generator seeded by Seed: the same options give the same prompts.
func RandomDataset(tk *tokenizer.Tokenizer, o RandomOptions) ([]Prompt, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	allowed := ordinaryTokens(tk)
	if o.VocabSize > 0 {
		// ordinaryTokens is ascending: keep the ids the model takes.
		n := sort.SearchInts(allowed, o.VocabSize)
		allowed = allowed[:n]
	}
	if len(allowed) == 0 {
		return nil, fmt.Errorf("the tokenizer has no ordinary tokens below the served vocabulary of %d ids to build random prompts from", o.VocabSize)
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
