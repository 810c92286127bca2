package conformance

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/safetensors"
)

// caseDir is the committed golden data, relative to this package.
var caseDir = filepath.Join("..", "testdata", "conformance")

func loadManifest(t testing.TB) *Manifest {
	t.Helper()
	m, err := LoadManifest(filepath.Join(caseDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// readAll opens a safetensors file and returns its tensors (copied out of
// the mapping) in name order plus its metadata.
func readAll(t testing.TB, path string) ([]safetensors.Tensor, map[string]string) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		x, err := f.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		x.Data = append([]byte(nil), x.Data...)
		ts = append(ts, x)
	}
	return ts, f.Metadata()
}

func TestManifestHashes(t *testing.T) {
	m := loadManifest(t)
	if err := m.Verify(caseDir); err != nil {
		t.Fatal(err)
	}
}

// TestGoldenDataStaysSmall keeps the committed case files within a few
// megabytes: they are cloned with every checkout.
func TestGoldenDataStaysSmall(t *testing.T) {
	const limit = 5 << 20
	var total int64
	err := filepath.WalkDir(caseDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total > limit {
		t.Errorf("testdata/conformance holds %d bytes, keep it under %d", total, limit)
	}
}

// TestManifestCoversEveryKernel pins that the golden data has at least two
// cases for every kernel Run knows, and no case for a kernel it does not.
func TestManifestCoversEveryKernel(t *testing.T) {
	m := loadManifest(t)
	count := map[string]int{}
	for _, c := range m.Cases {
		count[c.Kernel]++
	}
	for _, k := range Kernels() {
		if count[k] < 2 {
			t.Errorf("kernel %s has %d golden cases, want at least 2", k, count[k])
		}
		delete(count, k)
	}
	if len(count) != 0 {
		t.Errorf("golden cases for unknown kernels: %v", count)
	}
}

// TestManifestTolerancesMatch pins that the tolerances the generator
// recorded are the ones the comparator applies.
func TestManifestTolerancesMatch(t *testing.T) {
	m := loadManifest(t)
	for _, c := range m.Cases {
		want, err := Tolerances(c.Kernel)
		if err != nil {
			t.Fatalf("case %s: %v", c.Name, err)
		}
		got := map[string]Tolerance{}
		for name, mt := range c.Tolerance {
			tol, err := mt.Tolerance()
			if err != nil {
				t.Fatalf("case %s tensor %s: %v", c.Name, name, err)
			}
			got[name] = tol
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("case %s/%s: tolerances differ (-comparator +manifest):\n%s", c.Kernel, c.Name, diff)
		}
	}
}

// TestGoldenCases runs every committed case through the engine and compares
// the outputs with the reference's.
func TestGoldenCases(t *testing.T) {
	m := loadManifest(t)
	for _, c := range m.Cases {
		t.Run(c.Kernel+"/"+c.Name, func(t *testing.T) {
			f, err := safetensors.Open(filepath.Join(caseDir, c.In.Path))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if diff := cmp.Diff(c.Metadata, f.Metadata()); diff != "" {
				t.Errorf("case metadata differs from the manifest (-manifest +file):\n%s", diff)
			}
			got, err := Run(f)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			want, _ := readAll(t, filepath.Join(caseDir, c.Want.Path))
			tol, err := Tolerances(c.Kernel)
			if err != nil {
				t.Fatal(err)
			}
			reports, err := Compare(got, want, tol)
			for _, r := range reports {
				t.Logf("%-14s %-5s max_abs %.3g max_rel %.3g cos_diff %.3g substituted %d", r.Name, r.Kind, r.MaxAbs, r.MaxRel, r.CosDiff, r.Substituted)
			}
			if err != nil {
				t.Fatalf("Compare: %v", err)
			}
			shapes := map[string][]int{}
			for _, x := range got {
				shapes[x.Name] = x.Shape
			}
			for name, s := range c.Shapes {
				if g, ok := shapes[name]; ok {
					if diff := cmp.Diff(s, g, cmpopts.EquateEmpty()); diff != "" {
						t.Errorf("output %s shape differs from the manifest:\n%s", name, diff)
					}
				}
			}
		})
	}
}
