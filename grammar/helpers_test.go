package grammar

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cpmla/cpmla/tokenizer"
)

// toyVocab has every single byte as a token (ids 0-255), some multi-byte
// tokens that cross JSON and rule boundaries, and an end token with no
// text (the last id).
var toyTokens = []string{
	`{"`, `":`, `",`, `"}`, `"]`, `},`, `}}`, `]}`, `[{`, `[[`, `]]`, `":"`, `","`, `": "`, `", "`,
	`true`, `false`, `null`, ` the`, `abc",`, `1,`, `12`, `0.5`, `e+`, `\n`, `\"`, `\\`, `"a"`, "\n  ", "    ",
	`name`, `"name":`, `{"name": "`, `yes`, `no`, `hello`, `ab`, `ba`, `aaa`, "é", "\xe4\xb8", "\xad\xe6\x96\x87", "中文",
	`{}`, `[]`, `"",`, `:[`, `,"`, `1}`, `-1`, `.5`, `00`, `01`,
}

func toyVocab(t testing.TB) (*Vocab, int) {
	t.Helper()
	n := 256 + len(toyTokens) + 1
	v, err := NewVocab(n, func(id int) ([]byte, bool) {
		switch {
		case id < 256:
			return []byte{byte(id)}, true
		case id < 256+len(toyTokens):
			return []byte(toyTokens[id-256]), true
		}
		return nil, false
	})
	if err != nil {
		t.Fatal(err)
	}
	return v, n - 1
}

// The DeepSeek-V3 vocabulary as the model sees it (129280 ids), once.
var deepseekVocab = sync.OnceValues(func() (*Vocab, error) {
	tok, err := tokenizer.Default()
	if err != nil {
		return nil, err
	}
	return VocabFromTokenizer(tok, 129280)
})

func dsVocab(t testing.TB) (*Vocab, int) {
	t.Helper()
	v, err := deepseekVocab()
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := tokenizer.Default()
	return v, tok.EOS()
}

// testLimits are the server's limits without the wall-time bound: every
// deterministic limit (text, states, mask steps and bytes) is what the
// server enforces, but how long a compilation takes depends on how loaded
// the machine running the tests is, so a test's outcome must not.
func testLimits() Limits {
	lim := DefaultLimits()
	lim.MaxCompileTime = time.Hour
	return lim
}

func mustCompile(t testing.TB, spec Spec, v *Vocab) *Grammar {
	t.Helper()
	g, err := Compile(spec, v, testLimits())
	if err != nil {
		t.Fatalf("compile %v %q: %v", spec.Kind, spec.Text, err)
	}
	return g
}

func maskHas(mask []uint64, t int) bool { return mask[t>>6]&(1<<(t&63)) != 0 }

func maskTokens(mask []uint64, n int) []int {
	var out []int
	for t := range n {
		if maskHas(mask, t) {
			out = append(out, t)
		}
	}
	return out
}

// sample draws a uniformly random allowed token, preferring the end token
// with probability pEnd when it is allowed; -1 when nothing is allowed.
func sample(rng *rand.Rand, mask []uint64, n, end int, pEnd float64) int {
	if maskHas(mask, end) && rng.Float64() < pEnd {
		return end
	}
	allowed := maskTokens(mask, n)
	if len(allowed) == 0 {
		return -1
	}
	return allowed[rng.IntN(len(allowed))]
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0xfeed)) }
