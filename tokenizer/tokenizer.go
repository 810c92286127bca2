package tokenizer

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cpmla/cpmla/tokenizer/jinja"
)

// Tokenizer turns text into token ids and back. It is immutable after
// loading (apart from an internal word cache) and safe for concurrent use.
type Tokenizer struct {
	model *bpeModel
	norm  normalizer
	pre   preTokenizer
	// addedNorm matches the added tokens marked normalized, in normalized
	// text (nil when there is no normalizer: then added matches them all).
	addedNorm *addedMatcher
	// maxTokenBytes is the most input bytes one token can stand for; 0
	// when text can vanish or be absorbed (a Removed split, bytes with no
	// symbol, added tokens that strip whitespace), so that no such bound
	// holds.
	maxTokenBytes int

	tokens      []string // id → token string ("" for unused ids)
	present     []bool   // id is a token
	added       *addedMatcher
	addedTokens []AddedToken
	addedByID   map[int]int    // id → index into addedTokens
	addedByText map[string]int // content → id

	prefix, suffix   []int // ids Encode adds around the text when asked to
	bosID, eosID     int
	byteLevelDecoder bool
	cleanUp          bool

	chat     *jinja.Template
	chatVars map[string]any
}

var (
	//go:embed data/deepseek-v3/tokenizer.json
	defaultTokenizerJSON []byte
	//go:embed data/deepseek-v3/tokenizer_config.json
	defaultConfigJSON []byte
)

var defaultTokenizer = sync.OnceValues(func() (*Tokenizer, error) {
	t, err := Parse(defaultTokenizerJSON, defaultConfigJSON)
	if err != nil {
		return nil, fmt.Errorf("embedded DeepSeek-V3 tokenizer: %w", err)
	}
	return t, nil
})

// Default returns the embedded DeepSeek-V3 tokenizer. It is parsed once and
// shared.
func Default() (*Tokenizer, error) { return defaultTokenizer() }

// EncodeOptions separates the two things "special tokens" can mean.
type EncodeOptions struct {
	// AddSpecial adds the ids the tokenizer puts around every text (BOS
	// for DeepSeek-V3).
	AddSpecial bool
	// ParseSpecial recognises added-token strings such as
	// "<｜User｜>" in the text as their single ids. Without it they are
	// encoded as plain text, which is what untrusted text needs.
	ParseSpecial bool
}

// Encode tokenizes text. With addSpecial, BOS (or whatever the
// configuration puts around a text) is added and added-token strings in the
// text become their ids; without it no id is added and those strings are
// encoded as plain text.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	return t.EncodeWith(text, EncodeOptions{AddSpecial: addSpecial, ParseSpecial: addSpecial})
}

// EncodeWith tokenizes text with explicit options. A rendered chat
// template already contains BOS, so it is encoded with ParseSpecial and
// without AddSpecial (see EncodeChat).
func (t *Tokenizer) EncodeWith(text string, opts EncodeOptions) []int {
	ids := make([]int, 0, len(text)/3+len(t.prefix)+len(t.suffix)+1)
	ids, _ = t.encode(ids, text, opts, -1)
	return ids
}

// ErrTooManyTokens is what EncodeLimited returns (wrapped, with the
// numbers) for a text with more tokens than allowed.
var ErrTooManyTokens = errors.New("text has more tokens than allowed")

// EncodeLimited is EncodeWith for untrusted text: it stops as soon as the
// text provably has more than maxTokens tokens (the added BOS/EOS
// included) and returns ErrTooManyTokens, without tokenizing the rest.
// A text longer than maxTokens times the most bytes one token stands for
// is refused before any work; otherwise tokens are counted piece by piece
// as the pre-tokenizer cuts them. Below the limit the ids are exactly
// EncodeWith's.
func (t *Tokenizer) EncodeLimited(text string, opts EncodeOptions, maxTokens int) ([]int, error) {
	if maxTokens < 0 {
		return nil, fmt.Errorf("EncodeLimited: maxTokens is %d; use 0 or more", maxTokens)
	}
	specials := 0
	if opts.AddSpecial {
		specials = len(t.prefix) + len(t.suffix)
	}
	span := t.maxTokenBytes * t.norm.shrink()
	if lower := (len(text)+span-1)/max(span, 1) + specials; span > 0 && len(text) > 0 && lower > maxTokens {
		return nil, fmt.Errorf("%w: %d bytes are at least %d tokens (no token stands for more than %d bytes), more than %d",
			ErrTooManyTokens, len(text), lower, t.maxTokenBytes, maxTokens)
	}
	ids := make([]int, 0, min(len(text)/3+specials+1, maxTokens+1))
	ids, ok := t.encode(ids, text, opts, maxTokens)
	if !ok {
		return nil, fmt.Errorf("%w: a text of %d bytes has more than %d tokens", ErrTooManyTokens, len(text), maxTokens)
	}
	return ids, nil
}

// encode appends the ids of text; with limit >= 0 it stops, reporting
// false, once more than limit ids (with the suffix) are certain.
func (t *Tokenizer) encode(ids []int, text string, opts EncodeOptions, limit int) ([]int, bool) {
	reserve := 0
	if opts.AddSpecial {
		ids = append(ids, t.prefix...)
		reserve = len(t.suffix)
	}
	over := func() bool { return limit >= 0 && len(ids)+reserve > limit }
	if over() {
		return ids, false
	}
	ok := true
	if opts.ParseSpecial && len(t.addedTokens) > 0 {
		ok = t.added.each(text, func(seg addedSegment) bool {
			if seg.token >= 0 {
				ids = append(ids, t.added.tokens[seg.token].ID)
				return !over()
			}
			var fine bool
			ids, fine = t.encodeSegment(ids, seg.text, true, limit, reserve)
			return fine
		})
	} else {
		ids, ok = t.encodeSegment(ids, text, false, limit, reserve)
	}
	if !ok {
		return ids, false
	}
	if opts.AddSpecial {
		ids = append(ids, t.suffix...)
	}
	return ids, !over()
}

// encodeSegment encodes text that contains no (raw-matched) added tokens:
// normalization, then the normalized added tokens, then pre-tokenization
// and BPE.
func (t *Tokenizer) encodeSegment(ids []int, text string, parseSpecial bool, limit, reserve int) ([]int, bool) {
	if len(t.norm) > 0 {
		text = t.norm.apply(text)
		if parseSpecial && t.addedNorm != nil {
			ok := t.addedNorm.each(text, func(seg addedSegment) bool {
				if seg.token >= 0 {
					ids = append(ids, t.addedNorm.tokens[seg.token].ID)
					return limit < 0 || len(ids)+reserve <= limit
				}
				var fine bool
				ids, fine = t.encodeText(ids, seg.text, limit, reserve)
				return fine
			})
			return ids, ok
		}
	}
	return t.encodeText(ids, text, limit, reserve)
}

// encodeText pre-tokenizes and encodes normalized text.
func (t *Tokenizer) encodeText(ids []int, text string, limit, reserve int) ([]int, bool) {
	if text == "" {
		return ids, true
	}
	if limit < 0 {
		var buf [64]string
		for _, piece := range t.pre.appendPieces(buf[:0], text) {
			if piece != "" {
				ids = t.model.appendWord(ids, piece)
			}
		}
		return ids, true
	}
	ok := t.pre.(piecer).eachPiece(text, func(piece string) bool {
		if piece != "" {
			ids = t.model.appendWord(ids, piece)
		}
		return len(ids)+reserve <= limit
	})
	return ids, ok
}

// Decode turns ids back into text. Ids that are not tokens are skipped, as
// are special tokens when skipSpecial is set. The result is exactly the
// bytes the tokens stand for; if the ids cut a multi-byte character, the
// partial character is returned as it is (invalid UTF-8).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	buf := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		buf = t.appendToken(buf, id, skipSpecial)
	}
	if t.cleanUp {
		return cleanUpSpaces(string(buf))
	}
	return string(buf)
}

// appendToken appends the bytes of one token.
func (t *Tokenizer) appendToken(buf []byte, id int, skipSpecial bool) []byte {
	if id < 0 || id >= len(t.tokens) || !t.present[id] {
		return buf
	}
	if i, ok := t.addedByID[id]; ok {
		if skipSpecial && t.addedTokens[i].Special {
			return buf
		}
		return append(buf, t.addedTokens[i].Content...)
	}
	if t.byteLevelDecoder {
		return appendByteLevelDecoded(buf, t.tokens[id])
	}
	return append(buf, t.tokens[id]...)
}

// cleanUpSpaces removes the spaces before punctuation and contractions that
// word-level detokenizers leave (tokenizer_config.json's
// clean_up_tokenization_spaces).
func cleanUpSpaces(s string) string {
	return strings.NewReplacer(" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'",
		" n't", "n't", " 'm", "'m", " 's", "'s", " 've", "'ve", " 're", "'re").Replace(s)
}

// VocabSize is the number of ids, one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token string (an added token or a vocabulary
// entry, spelled as in tokenizer.json).
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.addedByText[s]; ok {
		return id, true
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Token returns the token string of an id as spelled in tokenizer.json.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || !t.present[id] {
		return "", false
	}
	return t.tokens[id], true
}

// BOS is the beginning-of-sequence id, or -1 when the configuration names
// none.
func (t *Tokenizer) BOS() int { return t.bosID }

// EOS is the end-of-sequence id, or -1 when the configuration names none.
func (t *Tokenizer) EOS() int { return t.eosID }

// IsSpecial reports whether id is an added token marked special (a control
// token that Decode skips when asked to).
func (t *Tokenizer) IsSpecial(id int) bool {
	i, ok := t.addedByID[id]
	return ok && t.addedTokens[i].Special
}
