package conformance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Manifest is testdata/conformance/manifest.json: every golden case the
// reference generator wrote, with the sha256 of its files.
type Manifest struct {
	Generator string         `json:"generator"`
	Numpy     string         `json:"numpy"`
	Cases     []ManifestCase `json:"cases"`
}

// ManifestCase describes one case: its input and want files (paths relative
// to the manifest's directory), the seed and metadata it was generated with,
// the shapes of its tensors and the tolerance of each output.
type ManifestCase struct {
	Name      string                       `json:"name"`
	Kernel    string                       `json:"kernel"`
	Seed      int64                        `json:"seed"`
	Metadata  map[string]string            `json:"metadata"`
	In        ManifestFile                 `json:"in"`
	Want      ManifestFile                 `json:"want"`
	Shapes    map[string][]int             `json:"shapes"`
	Tolerance map[string]ManifestTolerance `json:"tolerance"`
}

// ManifestFile is one case file and the sha256 of its bytes.
type ManifestFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// ManifestTolerance is a tolerance as the generator recorded it.
type ManifestTolerance struct {
	Kind    string  `json:"kind"`
	Abs     float64 `json:"abs"`
	Rel     float64 `json:"rel"`
	CosDiff float64 `json:"cos_diff"`
	Scores  string  `json:"scores"`
	Ties    string  `json:"ties"`
}

// Tolerance converts the recorded tolerance to the comparator's form.
func (t ManifestTolerance) Tolerance() (Tolerance, error) {
	kinds := map[string]Kind{"close": Close, "exact": Exact, "topk": TopK}
	k, ok := kinds[t.Kind]
	if !ok {
		return Tolerance{}, fmt.Errorf("unknown tolerance kind %q (known: close, exact, topk)", t.Kind)
	}
	return Tolerance{Kind: k, Abs: t.Abs, Rel: t.Rel, CosDiff: t.CosDiff, Scores: t.Scores, Ties: t.Ties}, nil
}

// LoadManifest reads and decodes a manifest.
func LoadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading conformance manifest: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decoding conformance manifest %s: %w", path, err)
	}
	return &m, nil
}

// Verify checks the sha256 of every case file against the files under dir
// (the manifest's directory) and returns every mismatch in one error.
func (m *Manifest) Verify(dir string) error {
	var errs []error
	for _, c := range m.Cases {
		for _, f := range []ManifestFile{c.In, c.Want} {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
			if err != nil {
				errs = append(errs, fmt.Errorf("case %s: %w", c.Name, err))
				continue
			}
			sum := sha256.Sum256(b)
			if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
				errs = append(errs, fmt.Errorf("case %s: %s has sha256 %s, the manifest says %s", c.Name, f.Path, got, f.SHA256))
			}
		}
	}
	return errors.Join(errs...)
}
