package numfmt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// quantizeForTest runs QuantizeE4M3Blocks with buffers of the right size.
func quantizeForTest(t *testing.T, w []float32, rows, cols int) ([]uint8, []float32) {
	t.Helper()
	br, bc := WeightScaleBlocks(rows, cols)
	codes, scales := make([]uint8, rows*cols), make([]float32, br*bc)
	if err := QuantizeE4M3Blocks(codes, scales, w, rows, cols); err != nil {
		t.Fatalf("[%d, %d]: %v", rows, cols, err)
	}
	return codes, scales
}

// TestQuantizeE4M3Blocks: on weights of assorted magnitudes and shapes with
// partial edge blocks, every block's scale is amax/448, its largest
// magnitude comes back within float32 rounding, and every element within
// half an e4m3 step (relative 2^-4, or 2^-10·scale in the subnormal range).
func TestQuantizeE4M3Blocks(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range []struct {
		rows, cols int
		scale      float64
	}{{1, 1, 1}, {128, 128, 0.02}, {129, 300, 3}, {5, 700, 1e-3}, {300, 17, 1e4}, {256, 256, 1e-30}, {0, 9, 1}} {
		w := make([]float32, sh.rows*sh.cols)
		for i := range w {
			// Mostly small values with a few large ones, as trained weights.
			w[i] = float32(sh.scale * r.NormFloat64() * math.Exp(2*r.NormFloat64()))
		}
		codes, scales := quantizeForTest(t, w, sh.rows, sh.cols)
		deq := make([]float32, len(w))
		if err := DequantizeE4M3Blocks(deq, codes, scales, sh.rows, sh.cols); err != nil {
			t.Fatal(err)
		}
		br, bc := WeightScaleBlocks(sh.rows, sh.cols)
		for bi := range br {
			for bj := range bc {
				var amax, dmax float64
				s := scales[bi*bc+bj]
				for i := bi * WeightBlock; i < min((bi+1)*WeightBlock, sh.rows); i++ {
					for j := bj * WeightBlock; j < min((bj+1)*WeightBlock, sh.cols); j++ {
						v, d := float64(w[i*sh.cols+j]), float64(deq[i*sh.cols+j])
						amax, dmax = max(amax, math.Abs(v)), max(dmax, math.Abs(d))
						if bound := math.Abs(v)/16*(1+1e-6) + float64(s)/1024*(1+1e-6); math.Abs(d-v) > bound {
							t.Errorf("[%d,%d] element (%d,%d): %v came back as %v (code %#02x, scale %v), error above %v", sh.rows, sh.cols, i, j, v, d, codes[i*sh.cols+j], s, bound)
						}
					}
				}
				if want := max(float32(amax)/448, MinWeightScale); s != want {
					t.Errorf("[%d,%d] block (%d,%d): scale %v, want amax/448 = %v", sh.rows, sh.cols, bi, bj, s, want)
				}
				if amax >= 448*MinWeightScale && math.Abs(dmax-amax) > amax*1e-6 {
					t.Errorf("[%d,%d] block (%d,%d): largest magnitude %v came back as %v", sh.rows, sh.cols, bi, bj, amax, dmax)
				}
			}
		}
	}
}

// TestQuantizeE4M3BlocksEdges pins the defined cases: an all-zero block
// (signed zeros kept) gets MinWeightScale, a block below 448·2^-126 too,
// large magnitudes saturate to 448·scale, and codes decode exactly.
func TestQuantizeE4M3BlocksEdges(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	w := make([]float32, 2*130)
	w[1] = negZero
	w[129] = 1e-40 // block (0, 1): tiny
	w[128] = -3e-41
	codes, scales := quantizeForTest(t, w, 2, 130)
	if d := cmp.Diff([]float32{MinWeightScale, MinWeightScale}, scales); d != "" {
		t.Errorf("scales (-want +got):\n%s", d)
	}
	if codes[0] != 0x00 || codes[1] != 0x80 {
		t.Errorf("zeros: codes %#02x %#02x, want 0x00 0x80", codes[0], codes[1])
	}
	if want := E4M3FromF32(float32(1e-40) / MinWeightScale); codes[129] != want || want == 0 {
		t.Errorf("tiny weight: code %#02x, want %#02x (nonzero)", codes[129], want)
	}
	// A block of one large value and its neighbours.
	w2 := []float32{math.MaxFloat32, -math.MaxFloat32 / 3, 1}
	codes2, scales2 := quantizeForTest(t, w2, 1, 3)
	if codes2[0] != 0x7E || F32FromE4M3(codes2[0])*scales2[0] != float32(448)*(math.MaxFloat32/448) {
		t.Errorf("MaxFloat32: code %#02x, scale %v", codes2[0], scales2[0])
	}
	deq := make([]float32, 3)
	if err := DequantizeE4M3Blocks(deq, codes2, scales2, 1, 3); err != nil {
		t.Fatal(err)
	}
	for i, c := range codes2 {
		if want := F32FromE4M3(c) * scales2[0]; math.Float32bits(deq[i]) != math.Float32bits(want) {
			t.Errorf("element %d: dequantized %v, want code·scale = %v", i, deq[i], want)
		}
	}
}

func TestQuantizeE4M3BlocksRefuses(t *testing.T) {
	tests := []struct {
		name       string
		w          []float32
		rows, cols int
		codes, sc  int
		wantErr    string
	}{
		{"NaN", []float32{0, float32(math.NaN()), 0, 0}, 2, 2, 4, 1, "weight [0, 1] is NaN; an fp8 weight must be finite"},
		{"+Inf", []float32{0, 0, 0, float32(math.Inf(1))}, 2, 2, 4, 1, "weight [1, 1] is +Inf"},
		{"-Inf", []float32{float32(math.Inf(-1))}, 1, 1, 1, 1, "weight [0, 0] is -Inf"},
		{"short codes", make([]float32, 4), 2, 2, 3, 1, "needs 4 codes and values, got 3 codes and 4 values"},
		{"short weight", make([]float32, 3), 2, 2, 4, 1, "got 4 codes and 3 values"},
		{"scales", make([]float32, 129), 1, 129, 129, 1, "needs [1, 2] = 2 block scales of 128×128, got 1"},
		{"negative", nil, -1, 2, 0, 0, "weight shape [-1, 2] is negative"},
	}
	for _, tc := range tests {
		err := QuantizeE4M3Blocks(make([]uint8, tc.codes), make([]float32, tc.sc), tc.w, tc.rows, tc.cols)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
	if err := DequantizeE4M3Blocks(make([]float32, 4), make([]uint8, 4), nil, 2, 2); err == nil || !strings.Contains(err.Error(), "needs [1, 1] = 1 block scales") {
		t.Errorf("DequantizeE4M3Blocks without scales: %v", err)
	}
}

// FuzzQuantizeE4M3Blocks: any float32 bits either are refused (NaN or Inf
// present) or quantize within the error bound.
func FuzzQuantizeE4M3Blocks(f *testing.F) {
	f.Add(uint8(3), []byte{0, 0, 128, 63, 0, 0, 0, 0, 1, 0, 0, 0})
	f.Add(uint8(1), []byte{255, 255, 127, 127, 0, 0, 128, 255})
	f.Fuzz(func(t *testing.T, cols uint8, raw []byte) {
		c := int(cols%200) + 1
		n := len(raw) / 4 / c * c
		w := make([]float32, n)
		finite := true
		for i := range w {
			w[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
			finite = finite && !math.IsNaN(float64(w[i])) && !math.IsInf(float64(w[i]), 0)
		}
		rows := n / c
		br, bc := WeightScaleBlocks(rows, c)
		codes, scales := make([]uint8, n), make([]float32, br*bc)
		err := QuantizeE4M3Blocks(codes, scales, w, rows, c)
		if !finite {
			if err == nil {
				t.Fatalf("non-finite weights accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range w {
			s := scales[(i/c)/WeightBlock*bc+(i%c)/WeightBlock]
			d := float64(F32FromE4M3(codes[i]) * s)
			if bound := math.Abs(float64(v))/16*(1+1e-6) + float64(s)/1024*(1+1e-6); math.Abs(d-float64(v)) > bound {
				t.Fatalf("element %d: %v came back as %v (scale %v)", i, v, d, s)
			}
		}
	})
}

func ExampleQuantizeE4M3Blocks() {
	w := []float32{0.5, -0.25, 1e-3, 2}
	codes, scales := make([]uint8, 4), make([]float32, 1)
	if err := QuantizeE4M3Blocks(codes, scales, w, 2, 2); err != nil {
		panic(err)
	}
	fmt.Printf("scale %v codes % x\n", scales[0], codes)
	// Output: scale 0.004464286 codes 6e e6 26 7e
}

// TestQuantizeE4M3BlocksUE8M0: with power-of-two scales every scale is the
// smallest power of two ≥ amax/448 (so the largest magnitude maps to at most
// 448), the codes are those of quantizing by that scale, and every element
// still comes back within half an e4m3 step.
func TestQuantizeE4M3BlocksUE8M0(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 200, 300
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(0.05 * r.NormFloat64() * math.Exp(r.NormFloat64()))
	}
	br, bc := WeightScaleBlocks(rows, cols)
	codes, scales := make([]uint8, rows*cols), make([]float32, br*bc)
	if err := QuantizeE4M3BlocksUE8M0(codes, scales, w, rows, cols); err != nil {
		t.Fatal(err)
	}
	_, plain := quantizeForTest(t, w, rows, cols)
	for b, s := range scales {
		if frac, _ := math.Frexp(float64(s)); frac != 0.5 {
			t.Fatalf("block %d: scale %v is not a power of two", b, s)
		}
		if p := plain[b]; !(s >= p && s < 2*p) {
			t.Errorf("block %d: scale %v is not the smallest power of two ≥ amax/448 = %v", b, s, p)
		}
	}
	deq := make([]float32, len(w))
	if err := DequantizeE4M3Blocks(deq, codes, scales, rows, cols); err != nil {
		t.Fatal(err)
	}
	for i, v := range w {
		s := float64(scales[(i/cols)/WeightBlock*bc+(i%cols)/WeightBlock])
		if bound := math.Abs(float64(v))/16*(1+1e-6) + s/1024*(1+1e-6); math.Abs(float64(deq[i])-float64(v)) > bound {
			t.Fatalf("element %d: %v came back as %v", i, v, deq[i])
		}
	}
}
