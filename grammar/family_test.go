package grammar

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/cpmla/cpmla/tokenizer"
)

// Qwen3's vocabulary (the tokenizer package's test copy, Apache-2.0): a
// second byte-level BPE family with its own merges and added tokens.
var qwen3Vocab = sync.OnceValues(func() (*Vocab, error) {
	read := func(name string) ([]byte, error) {
		f, err := os.Open("../tokenizer/testdata/families/qwen3/" + name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		var r io.Reader = f
		if bytes.HasSuffix([]byte(name), []byte(".gz")) {
			zr, err := gzip.NewReader(f)
			if err != nil {
				return nil, err
			}
			r = zr
		}
		return io.ReadAll(r)
	}
	tj, err := read("tokenizer.json.gz")
	if err != nil {
		return nil, err
	}
	cfg, err := read("tokenizer_config.json")
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Parse(tj, cfg)
	if err != nil {
		return nil, err
	}
	// Qwen3's models pad the vocabulary to 151936 ids.
	return VocabFromTokenizer(tok, 151936)
})

func TestQwen3Vocabulary(t *testing.T) {
	v, err := qwen3Vocab()
	if err != nil {
		t.Fatal(err)
	}
	eos := 151645 // <|im_end|>
	if b := v.TokenBytes(eos); len(b) != 0 {
		t.Fatalf("<|im_end|> has text %q; special tokens must have none", b)
	}
	bytesOf := byteTokens(t, v)
	for i, c := range featureSchemas[:8] {
		g := mustCompile(t, Spec{Kind: KindJSONSchema, Text: c.schema}, v)
		val := compileValidator(t, c.schema)
		for seed := range 3 {
			lm := &randomLM{seed: uint64(77*i + seed), scale: 2, n: v.Size()}
			gen := generate(t, g, lm, uint64(seed), eos, 300, bytesOf)
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(gen.text))
			if err != nil {
				t.Fatalf("%s seed %d: %q does not parse: %v", c.name, seed, gen.text, err)
			}
			if err := val.Validate(inst); err != nil {
				t.Fatalf("%s seed %d: %q does not validate: %v", c.name, seed, gen.text, err)
			}
		}
	}
	// The mask equals Accept over the whole vocabulary on a few steps.
	g := mustCompile(t, Spec{Kind: KindJSONSchema, Text: featureSchemas[0].schema}, v)
	m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{eos}})
	lm := &randomLM{seed: 5, scale: 2, n: v.Size()}
	rng := newRand(5)
	mask := make([]uint64, v.MaskWords())
	prev := eos
	for step := range 3 {
		checkMaskAgainstAccept(t, m, v, step)
		m.FillMask(mask)
		tok := lm.sample(rng, mask, prev)
		if err := m.Accept(tok); err != nil {
			t.Fatal(err)
		}
		prev = tok
	}
}
