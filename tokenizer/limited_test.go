package tokenizer

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEncodeLimited holds EncodeLimited to EncodeWith below the limit and
// to ErrTooManyTokens above it, for every option combination.
func TestEncodeLimited(t *testing.T) {
	tk := defaultForTest(t)
	texts := append(corpusForTest(t), strings.Repeat("long text with words 123 ", 300), "<｜User｜>hi<｜Assistant｜>")
	for _, text := range texts {
		for _, opts := range []EncodeOptions{{}, {AddSpecial: true}, {ParseSpecial: true}, {AddSpecial: true, ParseSpecial: true}} {
			want := tk.EncodeWith(text, opts)
			for _, limit := range []int{0, 1, len(want) - 1, len(want), len(want) + 5} {
				if limit < 0 {
					continue
				}
				got, err := tk.EncodeLimited(text, opts, limit)
				if len(want) <= limit {
					if err != nil {
						t.Fatalf("%q %+v limit %d: %v", text, opts, limit, err)
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("%q %+v limit %d (-EncodeWith +EncodeLimited):\n%s", text, opts, limit, diff)
					}
				} else if !errors.Is(err, ErrTooManyTokens) {
					t.Fatalf("%q %+v: %d tokens, limit %d: err %v, want ErrTooManyTokens", text, opts, len(want), limit, err)
				}
			}
		}
	}
	if _, err := tk.EncodeLimited("x", EncodeOptions{}, -1); err == nil {
		t.Error("negative limit accepted")
	}
}

// TestEncodeLimitedRefusesByLength checks the bound that needs no
// tokenization: no token stands for more than maxTokenBytes bytes.
func TestEncodeLimitedRefusesByLength(t *testing.T) {
	tk := defaultForTest(t)
	if tk.maxTokenBytes <= 0 || tk.maxTokenBytes > 1024 {
		t.Fatalf("maxTokenBytes = %d", tk.maxTokenBytes)
	}
	huge := strings.Repeat(" ", 100*tk.maxTokenBytes+1)
	_, err := tk.EncodeLimited(huge, EncodeOptions{}, 100)
	if !errors.Is(err, ErrTooManyTokens) || !strings.Contains(err.Error(), "at least") {
		t.Errorf("text of %d bytes with limit 100: %v, want the length bound", len(huge), err)
	}
	// The bound itself must hold: the longest token decodes to at most
	// maxTokenBytes bytes.
	longest := 0
	for id := range tk.VocabSize() {
		longest = max(longest, len(tk.Decode([]int{id}, false)))
	}
	if longest > tk.maxTokenBytes {
		t.Errorf("token of %d bytes, bound %d", longest, tk.maxTokenBytes)
	}
}

// TestEachPieceMatchesAppendPieces holds the incremental pre-tokenizer to
// the batch one for every split behavior and both match engines.
func TestEachPieceMatchesAppendPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	texts := corpusForTest(t)
	for range 200 {
		var b strings.Builder
		for range rng.IntN(30) {
			b.WriteString([]string{"a", "Ab", " ", "  ", "\n", "1", "234", "-", "'s", "é", "中文", "😀", ".", "\t"}[rng.IntN(14)])
		}
		texts = append(texts, b.String())
	}
	var stages []preTokenizer
	for name, b := range splitBehaviors {
		for _, inv := range []bool{false, true} {
			for _, p := range []string{patternDeepSeek, patternLlama3, `\s+`} {
				for _, force := range []bool{false, true} {
					m, err := compileSplitPattern(p, force)
					if err != nil {
						t.Fatal(err)
					}
					stages = append(stages, splitStage{m: m, behavior: b, invert: inv})
				}
			}
			stages = append(stages, splitStage{m: literalMatcher("a"), behavior: b, invert: inv})
			_ = name
		}
	}
	bl, _ := compileSplitPattern(patternByteLevel, false)
	stages = append(stages, byteLevelStage{addPrefixSpace: true, split: bl}, preTokenizerSequence{stages[0], byteLevelStage{}})
	for i, st := range stages {
		for _, text := range texts {
			want := st.appendPieces(nil, text)
			var got []string
			st.(piecer).eachPiece(text, func(p string) bool { got = append(got, p); return true })
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("stage %d %+v on %q (-batch +incremental):\n%s", i, st, text, diff)
			}
		}
	}
}

// FuzzEncodeLimited checks EncodeLimited against EncodeWith on any text.
func FuzzEncodeLimited(f *testing.F) {
	for _, s := range []string{"Hello world", "<｜User｜>x", " \n\n 12345", "中文😀"} {
		f.Add(s, uint16(3))
	}
	tk, err := Default()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string, limit uint16) {
		opts := EncodeOptions{AddSpecial: limit&1 == 0, ParseSpecial: limit&2 == 0}
		want := tk.EncodeWith(text, opts)
		got, err := tk.EncodeLimited(text, opts, int(limit>>2))
		if len(want) <= int(limit>>2) {
			if err != nil || !cmp.Equal(want, got) {
				t.Fatalf("%q limit %d: got %v, %v; want %v", text, limit>>2, got, err, want)
			}
		} else if !errors.Is(err, ErrTooManyTokens) {
			t.Fatalf("%q: %d tokens, limit %d: %v", text, len(want), limit>>2, err)
		}
	})
}

// BenchmarkEncodeLimited encodes a 1 MiB text (about 230,000 tokens) with a
// 4096-token limit (refused by its length alone), with a limit just above
// the length bound (refused once that many tokens are counted) and without
// a limit (the whole text); the ratios are the point of the early exit.
func BenchmarkEncodeLimited(b *testing.B) {
	tk := defaultForTest(b)
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		sb.WriteString("The quick brown fox jumps over the lazy dog 1234567. ")
	}
	text := sb.String()
	b.Run("limit-4096", func(b *testing.B) {
		for b.Loop() {
			if _, err := tk.EncodeLimited(text, EncodeOptions{}, 4096); err == nil {
				b.Fatal("accepted")
			}
		}
	})
	pastBound := len(text)/tk.maxTokenBytes + 10
	b.Run("limit-past-length-bound", func(b *testing.B) {
		for b.Loop() {
			if _, err := tk.EncodeLimited(text, EncodeOptions{}, pastBound); err == nil {
				b.Fatal("accepted")
			}
		}
	})
	b.Run("no-limit", func(b *testing.B) {
		for b.Loop() {
			tk.EncodeWith(text, EncodeOptions{})
		}
	})
}

// BenchmarkEncodeLimitedUnderLimit compares EncodeLimited with EncodeWith
// on prompts that fit (the common case): the incremental pre-tokenizer
// should cost about what the batch one does.
func BenchmarkEncodeLimitedUnderLimit(b *testing.B) {
	tk := defaultForTest(b)
	texts := corpusForTest(b)
	size := 0
	for _, s := range texts {
		size += len(s)
	}
	b.Run("EncodeWith", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			for _, s := range texts {
				tk.EncodeWith(s, EncodeOptions{AddSpecial: true, ParseSpecial: true})
			}
		}
	})
	b.Run("EncodeLimited", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			for _, s := range texts {
				if _, err := tk.EncodeLimited(s, EncodeOptions{AddSpecial: true, ParseSpecial: true}, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
