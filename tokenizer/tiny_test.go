package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCpmlaTinyMatchesItsTrainingEncoder holds the built-in cpmla-tiny's
// tokenizer.json, read by this package, to the ids its training run encoded
// with (tools/train/bpe.py, which wrote testdata/cpmla-tiny-ids.json with
// `bpe.py --tokenizer checkpoints/cpmla-tiny --out …`): the texts of every
// task in both forms, special tokens included, and whitespace, digit and
// contraction cases. A mismatch would serve the model ids it never saw.
func TestCpmlaTinyMatchesItsTrainingEncoder(t *testing.T) {
	tok, err := Load(filepath.Join("..", "checkpoints", "cpmla-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "cpmla-tiny-ids.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Texts []string `json:"texts"`
		IDs   [][]int  `json:"ids"`
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Texts) == 0 || len(want.Texts) != len(want.IDs) {
		t.Fatalf("%d texts, %d id lists", len(want.Texts), len(want.IDs))
	}
	for i, text := range want.Texts {
		got := tok.EncodeWith(text, EncodeOptions{ParseSpecial: true})
		if diff := cmp.Diff(want.IDs[i], got); diff != "" {
			t.Errorf("text %d %.60q: ids differ (-training +cpmla):\n%s", i, text, diff)
		}
		if back := tok.Decode(got, false); back != text {
			t.Errorf("text %d: decodes to %.60q, want %.60q", i, back, text)
		}
	}
}
