package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cpmla/cpmla/internal/boundedread"
	"github.com/cpmla/cpmla/tokenizer/jinja"
)

// File names inside a tokenizer directory. ChatTemplateFile, when present,
// holds the chat template and takes precedence over tokenizer_config.json's
// chat_template (as in Hugging Face transformers).
const (
	TokenizerFile    = "tokenizer.json"
	ConfigFile       = "tokenizer_config.json"
	ChatTemplateFile = "chat_template.jinja"
)

// Sizes a tokenizer is refused beyond, checked before anything of that
// size is allocated. Real tokenizers are far below them (the largest
// vocabularies have about 260,000 entries in files of about 30 MB).
const (
	MaxTokenizerFileBytes = 256 << 20
	MaxConfigFileBytes    = 64 << 20
	maxVocabEntries       = 1 << 22
	maxMerges             = 1 << 22
	maxAddedTokens        = 1 << 20
	maxTokenBytes         = 1 << 16
	maxPatternBytes       = 1 << 16
	// maxIDGap bounds how far ids may run past the number of tokens: the
	// id table is as long as the largest id.
	maxIDGap = 1 << 16
)

// hfTokenizer is the part of tokenizer.json this package reads.
type hfTokenizer struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *hfModel        `json:"model"`
}

type hfModel struct {
	Type                    string          `json:"type"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	UnkToken                *string         `json:"unk_token"`
	Dropout                 *float64        `json:"dropout"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
}

// component is a normalizer, pre-tokenizer, post-processor or decoder
// entry: a type tag and its fields.
type component struct {
	Type           string            `json:"type"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Decoders       []json.RawMessage `json:"decoders"`
	Pattern        *splitPattern     `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Single         []templatePiece   `json:"single"`
	Processors     []json.RawMessage `json:"processors"`
}

type splitPattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type templatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

// hfConfig is the part of tokenizer_config.json this package reads.
type hfConfig struct {
	AddBOSToken  *bool           `json:"add_bos_token"`
	AddEOSToken  *bool           `json:"add_eos_token"`
	BOSToken     configToken     `json:"bos_token"`
	EOSToken     configToken     `json:"eos_token"`
	PadToken     configToken     `json:"pad_token"`
	UnkToken     configToken     `json:"unk_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
	CleanUp      bool            `json:"clean_up_tokenization_spaces"`
}

// configToken is a token named in tokenizer_config.json, written either as
// a string or as an AddedToken object.
type configToken struct {
	Content string
	Set     bool
}

func (c *configToken) UnmarshalJSON(data []byte) error {
	if bytes.Equal(data, []byte("null")) {
		return nil
	}
	if len(data) > 0 && data[0] == '"' {
		c.Set = true
		return json.Unmarshal(data, &c.Content)
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return fmt.Errorf("token must be a string or an object with \"content\": %w", err)
	}
	if obj.Content == nil {
		return errors.New("token object has no \"content\"")
	}
	c.Content, c.Set = *obj.Content, true
	return nil
}

// Load reads tokenizer.json (required) and tokenizer_config.json (optional)
// from dir.
func Load(dir string) (*Tokenizer, error) {
	return load(dir, func(name string, limit int64) ([]byte, error) {
		return boundedread.Path(filepath.Join(dir, name), limit)
	})
}

// LoadFS is Load for the files at the root of fsys (a checkpoint embedded in
// the binary); where names it in messages.
func LoadFS(fsys fs.FS, where string) (*Tokenizer, error) {
	return load(where, func(name string, limit int64) ([]byte, error) { return boundedread.File(fsys, name, limit) })
}

// load reads the tokenizer's files with read, which refuses a file larger
// than its limit before reading it.
func load(dir string, read func(name string, limit int64) ([]byte, error)) (*Tokenizer, error) {
	tokJSON, err := read(TokenizerFile, MaxTokenizerFileBytes)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}
	cfgJSON, err := read(ConfigFile, MaxConfigFileBytes)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}
	t, err := Parse(tokJSON, cfgJSON)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}
	tpl, err := read(ChatTemplateFile, jinja.MaxTemplateBytes)
	switch {
	case err == nil:
		if t, err = t.WithChatTemplate(string(tpl)); err != nil {
			return nil, fmt.Errorf("load tokenizer from %s: %s: %w", dir, ChatTemplateFile, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}
	return t, nil
}

// WithChatTemplate returns a copy of the tokenizer that renders chats with
// the given template source instead of its own (vLLM's --chat-template).
func (t *Tokenizer) WithChatTemplate(src string) (*Tokenizer, error) {
	tpl, err := jinja.Parse(src)
	if err != nil {
		return nil, err
	}
	c := *t
	c.chat = tpl
	if c.chatVars == nil {
		c.chatVars = map[string]any{}
	}
	return &c, nil
}

// LoadChatTemplate reads a --chat-template argument as vLLM does: the path
// of a file, or (when no such file exists and the argument contains one of
// "{", "}" or a newline) the template itself.
func LoadChatTemplate(arg string) (string, error) {
	data, err := boundedread.Path(arg, jinja.MaxTemplateBytes)
	if err == nil {
		return string(data), nil
	}
	if errors.Is(err, os.ErrNotExist) {
		if strings.ContainsAny(arg, "{}\n") {
			return arg, nil
		}
		return "", fmt.Errorf("chat template %q is neither a file nor a template: %w", arg, err)
	}
	return "", fmt.Errorf("chat template: %w", err)
}

// ForCheckpoint returns the tokenizer of a checkpoint directory: the one in
// dir when dir holds a tokenizer.json, the embedded DeepSeek-V3 tokenizer
// otherwise (and when dir is empty).
func ForCheckpoint(dir string) (*Tokenizer, error) {
	if dir == "" {
		return Default()
	}
	if _, err := os.Stat(filepath.Join(dir, TokenizerFile)); err == nil {
		return Load(dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("look for %s in %s: %w", TokenizerFile, dir, err)
	}
	return Default()
}

// Parse builds a tokenizer from the contents of tokenizer.json and
// tokenizer_config.json (configJSON may be empty).
func Parse(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	return parse(tokenizerJSON, configJSON, false)
}

// parse is Parse; forceRegex makes every split pattern run on the general
// regular-expression engine (the tests compare both paths).
func parse(tokenizerJSON, configJSON []byte, forceRegex bool) (*Tokenizer, error) {
	if len(tokenizerJSON) > MaxTokenizerFileBytes || len(configJSON) > MaxConfigFileBytes {
		return nil, fmt.Errorf("%s of %d bytes or %s of %d bytes is larger than allowed (%d, %d)", TokenizerFile, len(tokenizerJSON), ConfigFile, len(configJSON), MaxTokenizerFileBytes, MaxConfigFileBytes)
	}
	var hf hfTokenizer
	if err := json.Unmarshal(tokenizerJSON, &hf); err != nil {
		return nil, fmt.Errorf("parse %s: %w", TokenizerFile, err)
	}
	var cfg hfConfig
	if len(bytes.TrimSpace(configJSON)) > 0 {
		if err := json.Unmarshal(configJSON, &cfg); err != nil {
			return nil, fmt.Errorf("parse %s: %w", ConfigFile, err)
		}
	}
	t := &Tokenizer{bosID: -1, eosID: -1, cleanUp: cfg.CleanUp}
	var err error
	if t.model, err = buildModel(hf.Model); err != nil {
		return nil, fmt.Errorf("%s model: %w", TokenizerFile, err)
	}
	if t.norm, err = buildNormalizer(hf.Normalizer, 0); err != nil {
		return nil, fmt.Errorf("%s normalizer: %w", TokenizerFile, err)
	}
	if err := t.buildVocab(hf.Model.Vocab, hf.AddedTokens); err != nil {
		return nil, fmt.Errorf("%s: %w", TokenizerFile, err)
	}
	if t.pre, t.model.byteLevel, err = buildPreTokenizer(hf.PreTokenizer, forceRegex); err != nil {
		return nil, fmt.Errorf("%s pre_tokenizer: %w", TokenizerFile, err)
	}
	if t.model.byteLevel {
		for b := range 256 {
			t.model.byteSymbols[b] = -1
			if id, ok := t.model.vocab[byteLevelEncoded[b]]; ok {
				t.model.byteSymbols[b] = int32(id)
			}
		}
	}
	t.maxTokenBytes = t.tokenByteBound()
	if t.byteLevelDecoder, err = checkDecoder(hf.Decoder); err != nil {
		return nil, fmt.Errorf("%s decoder: %w", TokenizerFile, err)
	}
	if err := t.configureSpecials(hf.PostProcessor, cfg); err != nil {
		return nil, err
	}
	if len(cfg.ChatTemplate) > 0 && !bytes.Equal(cfg.ChatTemplate, []byte("null")) {
		src, err := chatTemplateSource(cfg.ChatTemplate)
		if err != nil {
			return nil, fmt.Errorf("%s chat_template: %w", ConfigFile, err)
		}
		if t.chat, err = jinja.Parse(src); err != nil {
			return nil, fmt.Errorf("%s chat_template: %w", ConfigFile, err)
		}
		t.chatVars = map[string]any{}
		for name, tok := range map[string]configToken{"bos_token": cfg.BOSToken, "eos_token": cfg.EOSToken, "pad_token": cfg.PadToken, "unk_token": cfg.UnkToken} {
			if tok.Set {
				t.chatVars[name] = tok.Content
			}
		}
	}
	return t, nil
}

func buildModel(m *hfModel) (*bpeModel, error) {
	if m == nil {
		return nil, errors.New("missing \"model\"")
	}
	if m.Type != "BPE" && !(m.Type == "" && m.Merges != nil) {
		return nil, fmt.Errorf("model type %q is not supported (supported: BPE)", m.Type)
	}
	if m.Vocab == nil {
		return nil, errors.New("BPE model has no \"vocab\"")
	}
	if len(m.Vocab) > maxVocabEntries {
		return nil, fmt.Errorf("vocabulary has %d entries, more than the %d supported", len(m.Vocab), maxVocabEntries)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("BPE dropout %g is not supported for inference (need null or 0)", *m.Dropout)
	}
	if m.ByteFallback {
		return nil, errors.New("BPE byte_fallback=true is not supported (need false)")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("BPE continuing_subword_prefix %q is not supported (need null or \"\")", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("BPE end_of_word_suffix %q is not supported (need null or \"\")", *m.EndOfWordSuffix)
	}
	model := &bpeModel{vocab: m.Vocab, unkID: -1, ignoreMerges: m.IgnoreMerges, cache: make(map[string][]int)}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		model.unkID = id
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	model.merges = make(map[uint64]bpeMerge, len(pairs))
	for rank, p := range pairs {
		l, lok := m.Vocab[p[0]]
		r, rok := m.Vocab[p[1]]
		merged, mok := m.Vocab[p[0]+p[1]]
		switch {
		case !lok:
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, p[0], p[1], p[0])
		case !rok:
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, p[0], p[1], p[1])
		case !mok:
			return nil, fmt.Errorf("merge %d (%q %q): the merged token %q is not in the vocabulary", rank, p[0], p[1], p[0]+p[1])
		}
		key := pairKey(int32(l), int32(r))
		if _, dup := model.merges[key]; !dup { // the first (lowest) rank wins
			model.merges[key] = bpeMerge{rank: int32(rank), id: int32(merged)}
		}
	}
	return model, nil
}

// parseMerges accepts both spellings of the merge list: ["a b", …] and
// [["a", "b"], …].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("merges must be a list: %w", err)
	}
	if len(items) > maxMerges {
		return nil, fmt.Errorf("%d merges, more than the %d supported", len(items), maxMerges)
	}
	out := make([][2]string, len(items))
	for i, it := range items {
		if len(it) > 0 && it[0] == '"' {
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return nil, fmt.Errorf("merge %d: %w", i, err)
			}
			l, r, ok := strings.Cut(s, " ")
			if !ok || l == "" || r == "" || strings.Contains(r, " ") {
				return nil, fmt.Errorf("merge %d %q: need two tokens separated by one space", i, s)
			}
			out[i] = [2]string{l, r}
			continue
		}
		var pair []string
		if err := json.Unmarshal(it, &pair); err != nil {
			return nil, fmt.Errorf("merge %d: need \"a b\" or [\"a\", \"b\"]: %w", i, err)
		}
		if len(pair) != 2 {
			return nil, fmt.Errorf("merge %d: need a pair of tokens, got %d", i, len(pair))
		}
		out[i] = [2]string{pair[0], pair[1]}
	}
	return out, nil
}

// buildVocab sets up the id → token table and the added tokens.
func (t *Tokenizer) buildVocab(vocab map[string]int, added []AddedToken) error {
	if len(added) > maxAddedTokens {
		return fmt.Errorf("%d added tokens, more than the %d supported", len(added), maxAddedTokens)
	}
	maxID := -1
	for tok, id := range vocab {
		if id < 0 {
			return fmt.Errorf("vocabulary token %q has negative id %d", tok, id)
		}
		if len(tok) > maxTokenBytes {
			return fmt.Errorf("vocabulary token of %d bytes (id %d) is longer than the %d supported", len(tok), id, maxTokenBytes)
		}
		maxID = max(maxID, id)
	}
	for _, a := range added {
		if len(a.Content) > maxTokenBytes {
			return fmt.Errorf("added token of %d bytes (id %d) is longer than the %d supported", len(a.Content), a.ID, maxTokenBytes)
		}
		maxID = max(maxID, a.ID)
	}
	if n := len(vocab) + len(added); maxID >= n+maxIDGap {
		return fmt.Errorf("largest token id %d is far beyond the %d tokens (ids may run at most %d past the count)", maxID, n, maxIDGap)
	}
	for _, a := range added {
		if a.ID < 0 {
			return fmt.Errorf("added token %q has negative id %d", a.Content, a.ID)
		}
		maxID = max(maxID, a.ID)
	}
	const maxVocab = 1 << 24
	if maxID >= maxVocab {
		return fmt.Errorf("token id %d exceeds the supported vocabulary size %d", maxID, maxVocab)
	}
	t.tokens = make([]string, maxID+1)
	t.present = make([]bool, maxID+1)
	for tok, id := range vocab {
		if t.present[id] {
			return fmt.Errorf("id %d is used by both %q and %q", id, t.tokens[id], tok)
		}
		t.tokens[id], t.present[id] = tok, true
	}
	t.addedByID = make(map[int]int, len(added))
	t.addedByText = make(map[string]int, len(added))
	var matchable []AddedToken
	for _, a := range added {
		if a.Content == "" {
			return fmt.Errorf("added token %d has empty content", a.ID)
		}
		if t.present[a.ID] && t.tokens[a.ID] != a.Content {
			return fmt.Errorf("added token %q has id %d, which already belongs to %q", a.Content, a.ID, t.tokens[a.ID])
		}
		t.tokens[a.ID], t.present[a.ID] = a.Content, true
		if other, dup := t.addedByText[a.Content]; dup && other != a.ID {
			return fmt.Errorf("added token %q appears with ids %d and %d", a.Content, other, a.ID)
		}
		t.addedByText[a.Content] = a.ID
		t.addedByID[a.ID] = len(matchable)
		matchable = append(matchable, a)
	}
	t.addedTokens = matchable
	if len(t.norm) == 0 {
		t.added = newAddedMatcher(matchable)
		return nil
	}
	// With a normalizer, tokens marked normalized are matched in the
	// normalized text, the others in the raw text.
	var raw, normed []AddedToken
	for _, a := range matchable {
		if a.Normalized {
			normed = append(normed, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.added = newAddedMatcher(raw)
	if len(normed) > 0 {
		t.addedNorm = newAddedMatcher(normed)
	}
	return nil
}

// tokenByteBound is the most input bytes one token can stand for, or 0
// when text can vanish or be absorbed, so that no bound holds.
func (t *Tokenizer) tokenByteBound() int {
	if removesText(t.pre) {
		return 0
	}
	for _, a := range t.addedTokens {
		if a.LStrip || a.RStrip {
			return 0
		}
	}
	n := 4 // an unknown character is one token
	if t.model.byteLevel {
		for _, id := range t.model.byteSymbols {
			if id < 0 {
				return 0
			}
		}
	} else if t.model.unkID < 0 {
		return 0
	}
	for id, tok := range t.tokens {
		if !t.present[id] {
			continue
		}
		if t.model.byteLevel {
			if _, added := t.addedByID[id]; !added {
				n = max(n, utf8.RuneCountInString(tok))
				continue
			}
		}
		n = max(n, len(tok))
	}
	return n
}

// removesText reports whether a pre-tokenizer drops input (a Removed
// split).
func removesText(p preTokenizer) bool {
	switch x := p.(type) {
	case preTokenizerSequence:
		for _, s := range x {
			if removesText(s) {
				return true
			}
		}
	case splitStage:
		return x.behavior == splitRemoved
	}
	return false
}

// buildPreTokenizer returns the pre-tokenizer and whether it contains the
// byte-level stage (which makes the model spell words in the byte-level
// alphabet).
func buildPreTokenizer(raw json.RawMessage, forceRegex bool) (preTokenizer, bool, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return preTokenizerSequence(nil), false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, err
	}
	switch c.Type {
	case "Sequence":
		var seq preTokenizerSequence
		byteLevel := false
		for i, sub := range c.Pretokenizers {
			p, bl, err := buildPreTokenizer(sub, forceRegex)
			if err != nil {
				return nil, false, fmt.Errorf("stage %d: %w", i, err)
			}
			seq = append(seq, p)
			byteLevel = byteLevel || bl
		}
		return seq, byteLevel, nil
	case "Split":
		if c.Pattern == nil {
			return nil, false, errors.New("pre-tokenizer Split has no pattern")
		}
		behavior, ok := splitBehaviors[c.Behavior]
		if !ok {
			return nil, false, fmt.Errorf("pre-tokenizer Split: behavior %q is not supported (supported: %s)", c.Behavior, strings.Join(slices.Sorted(maps.Keys(splitBehaviors)), ", "))
		}
		var m matcher
		switch {
		case c.Pattern.Regex != nil:
			var err error
			if m, err = compileSplitPattern(*c.Pattern.Regex, forceRegex); err != nil {
				return nil, false, err
			}
		case c.Pattern.String != nil:
			m = literalMatcher(*c.Pattern.String)
		default:
			return nil, false, errors.New("pre-tokenizer Split: its pattern needs \"Regex\" or \"String\"")
		}
		return splitStage{m: m, behavior: behavior, invert: c.Invert}, false, nil
	case "ByteLevel":
		st := byteLevelStage{addPrefixSpace: c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			m, err := compileSplitPattern(patternByteLevel, forceRegex)
			if err != nil {
				return nil, false, err
			}
			st.split = m
		}
		return st, true, nil
	}
	return nil, false, fmt.Errorf("pre-tokenizer %q is not supported (supported: Sequence, Split, ByteLevel)", c.Type)
}

// checkDecoder accepts a ByteLevel decoder (possibly inside a Sequence) or
// none, and reports which.
func checkDecoder(raw json.RawMessage) (bool, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, err
	}
	switch c.Type {
	case "ByteLevel":
		return true, nil
	case "Sequence":
		byteLevel := false
		for _, d := range c.Decoders {
			bl, err := checkDecoder(d)
			if err != nil {
				return false, err
			}
			byteLevel = byteLevel || bl
		}
		return byteLevel, nil
	}
	return false, fmt.Errorf("decoder %q is not supported (supported: ByteLevel, Sequence of ByteLevel, null)", c.Type)
}

// configureSpecials decides the BOS and EOS ids and whether Encode adds
// them. tokenizer_config.json's add_bos_token/add_eos_token decide when
// present (as the Llama-family tokenizer classes do); otherwise a
// TemplateProcessing post-processor's single template does.
func (t *Tokenizer) configureSpecials(post json.RawMessage, cfg hfConfig) error {
	lookup := func(name string, tok configToken) (int, error) {
		if !tok.Set {
			return -1, nil
		}
		id, ok := t.TokenID(tok.Content)
		if !ok {
			return -1, fmt.Errorf("%s %s %q is not a token of %s", ConfigFile, name, tok.Content, TokenizerFile)
		}
		return id, nil
	}
	var err error
	if t.bosID, err = lookup("bos_token", cfg.BOSToken); err != nil {
		return err
	}
	if t.eosID, err = lookup("eos_token", cfg.EOSToken); err != nil {
		return err
	}
	var pc component
	if len(post) > 0 && !bytes.Equal(post, []byte("null")) {
		if err := json.Unmarshal(post, &pc); err != nil {
			return fmt.Errorf("%s post_processor: %w", TokenizerFile, err)
		}
	}
	if pc.Type == "Sequence" {
		// Llama 3.1: ByteLevel (offsets only) then TemplateProcessing. At
		// most one stage may add tokens.
		var templ *component
		for i, raw := range pc.Processors {
			var sub component
			if err := json.Unmarshal(raw, &sub); err != nil {
				return fmt.Errorf("%s post_processor stage %d: %w", TokenizerFile, i, err)
			}
			switch sub.Type {
			case "ByteLevel":
			case "TemplateProcessing":
				if templ != nil {
					return fmt.Errorf("%s post_processor: two TemplateProcessing stages are not supported", TokenizerFile)
				}
				templ = &sub
			default:
				return fmt.Errorf("%s post_processor stage %d %q is not supported (supported in a Sequence: ByteLevel, TemplateProcessing)", TokenizerFile, i, sub.Type)
			}
		}
		pc = component{}
		if templ != nil {
			pc = *templ
		}
	}
	switch pc.Type {
	case "", "ByteLevel":
	case "TemplateProcessing":
		seen := false
		for _, p := range pc.Single {
			switch {
			case p.Sequence != nil:
				seen = true
			case p.SpecialToken != nil:
				id, ok := t.TokenID(p.SpecialToken.ID)
				if !ok {
					return fmt.Errorf("%s post_processor: special token %q is not in the vocabulary", TokenizerFile, p.SpecialToken.ID)
				}
				if seen {
					t.suffix = append(t.suffix, id)
				} else {
					t.prefix = append(t.prefix, id)
				}
			}
		}
	default:
		return fmt.Errorf("%s post_processor %q is not supported (supported: ByteLevel, TemplateProcessing, a Sequence of them, null)", TokenizerFile, pc.Type)
	}
	if cfg.AddBOSToken != nil || cfg.AddEOSToken != nil {
		t.prefix, t.suffix = nil, nil
		if cfg.AddBOSToken != nil && *cfg.AddBOSToken {
			if t.bosID < 0 {
				return fmt.Errorf("%s: add_bos_token is true but bos_token is not set; set bos_token or add_bos_token=false", ConfigFile)
			}
			t.prefix = []int{t.bosID}
		}
		if cfg.AddEOSToken != nil && *cfg.AddEOSToken {
			if t.eosID < 0 {
				return fmt.Errorf("%s: add_eos_token is true but eos_token is not set; set eos_token or add_eos_token=false", ConfigFile)
			}
			t.suffix = []int{t.eosID}
		}
	}
	return nil
}

// chatTemplateSource returns the chat template: a string, or the entry
// named "default" of a list of {name, template}.
func chatTemplateSource(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("need a string or a list of {name, template}: %w", err)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New("no template named \"default\"")
}
