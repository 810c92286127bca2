package kernels

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func rmsNorm64(x, w []float32, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(w[i]) * float64(v) * r
	}
	return y
}

func layerNorm64(x, w, b []float32, eps float64) []float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	mean := s / float64(len(x))
	var ss float64
	for _, v := range x {
		d := float64(v) - mean
		ss += d * d
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = (float64(v)-mean)*r*float64(w[i]) + float64(b[i])
	}
	return y
}

func TestNorms(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		scale  float32 // input magnitude
		offset float32 // added to every input (LayerNorm must remove it)
		eps    float32
	}{
		{"one", 1, 1, 0, 1e-6},
		{"odd", 3, 1, 0, 1e-6},
		{"rope width", 64, 1, 0, 1e-6},
		{"latent", 512, 0.01, 0, 1e-6},
		{"odd wide", 513, 100, 0, 1e-5},
		{"hidden", 7168, 3, 0.5, 1e-6},
		{"large", 256, 1e4, 1e3, 1e-6},
		{"tiny eps-dominated", 128, 1e-4, 0, 1e-5},
	}
	r := newRand(4)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := randSlice(r, tc.n, tc.scale)
			for i := range x {
				x[i] += tc.offset
			}
			w := randSlice(r, tc.n, 2)
			b := randSlice(r, tc.n, 1)
			opt := cmpopts.EquateApprox(2e-6, 1e-6)

			got := make([]float32, tc.n)
			RMSNorm(got, x, w, tc.eps)
			if diff := cmp.Diff(rmsNorm64(x, w, float64(tc.eps)), to64(got), opt); diff != "" {
				t.Errorf("RMSNorm (-want +got):\n%s", diff)
			}
			alias := append([]float32(nil), x...)
			RMSNorm(alias, alias, w, tc.eps)
			if diff := cmp.Diff(got, alias); diff != "" {
				t.Errorf("RMSNorm in place differs from out of place (-out +in):\n%s", diff)
			}

			got = make([]float32, tc.n)
			LayerNorm(got, x, w, b, tc.eps)
			// The float32 mean of large offset rows loses a few ulps of the
			// offset; the bound scales with offset/spread.
			lopt := cmpopts.EquateApprox(2e-5, 2e-5)
			if diff := cmp.Diff(layerNorm64(x, w, b, float64(tc.eps)), to64(got), lopt); diff != "" {
				t.Errorf("LayerNorm (-want +got):\n%s", diff)
			}
			alias = append([]float32(nil), x...)
			LayerNorm(alias, alias, w, b, tc.eps)
			if diff := cmp.Diff(got, alias); diff != "" {
				t.Errorf("LayerNorm in place differs from out of place (-out +in):\n%s", diff)
			}
		})
	}
}

func TestNormEdgeCases(t *testing.T) {
	// A constant row has zero variance: LayerNorm returns the bias exactly.
	x := []float32{2.5, 2.5, 2.5, 2.5, 2.5}
	w := []float32{1, 2, 3, 4, 5}
	b := []float32{-1, 0, 1, 2, 3}
	got := make([]float32, 5)
	LayerNorm(got, x, w, b, 1e-6)
	if diff := cmp.Diff(b, got); diff != "" {
		t.Errorf("LayerNorm of a constant row (-bias +got):\n%s", diff)
	}
	// An all-zero row stays zero under RMSNorm (eps keeps it finite).
	zero := make([]float32, 7)
	RMSNorm(got[:0], zero[:0], w[:0], 1e-6) // empty rows are allowed
	out := make([]float32, 7)
	RMSNorm(out, zero, make([]float32, 7), 1e-6)
	if diff := cmp.Diff(zero, out); diff != "" {
		t.Errorf("RMSNorm of zeros (-want +got):\n%s", diff)
	}
	expectPanic(t, "RMSNorm lengths", func() { RMSNorm(make([]float32, 3), make([]float32, 3), make([]float32, 2), 1e-6) })
	expectPanic(t, "LayerNorm lengths", func() {
		LayerNorm(make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 4), 1e-6)
	})
}

func TestSiLUSwiGLU(t *testing.T) {
	tests := []struct {
		x    float32
		want float64
	}{
		{0, 0},
		{1, 1 / (1 + math.Exp(-1))},
		{-1, -1 / (1 + math.Exp(1))},
		{20, 20 / (1 + math.Exp(-20))},
		{-200, -200 / (1 + math.Exp(200))},
		{-1e4, 0}, // exp overflows: −1e4/Inf = −0
		{1e4, 1e4},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, float64(SiLU(tc.x)), cmpopts.EquateApprox(1e-7, 1e-30)); diff != "" {
			t.Errorf("SiLU(%v) (-want +got):\n%s", tc.x, diff)
		}
	}
	r := newRand(5)
	g := randSlice(r, 37, 6)
	u := randSlice(r, 37, 2)
	want := make([]float64, len(g))
	for i := range g {
		gv := float64(g[i])
		want[i] = gv / (1 + math.Exp(-gv)) * float64(u[i])
	}
	got := make([]float32, len(g))
	SwiGLU(got, g, u)
	if diff := cmp.Diff(want, to64(got), cmpopts.EquateApprox(2e-7, 1e-12)); diff != "" {
		t.Errorf("SwiGLU (-want +got):\n%s", diff)
	}
	SwiGLU(g, g, u) // dst aliases gate
	if diff := cmp.Diff(got, g); diff != "" {
		t.Errorf("SwiGLU in place (-out +in):\n%s", diff)
	}
	expectPanic(t, "SwiGLU lengths", func() { SwiGLU(make([]float32, 2), make([]float32, 2), make([]float32, 3)) })
}

// TestSwiGLUFastBits: every implementation's SwiGLU has the bits of the
// scalar SiLU times up — the AVX-512 path reproduces math.Exp operation for
// operation on groups of eight within ±30 — over a million gates spread
// across the range and its edges (±30 and just past it, tiny, subnormal,
// zero of both signs, large, infinite and NaN, mixed into groups of eight
// with ordinary values), in place too.
func TestSwiGLUFastBits(t *testing.T) {
	r := newRand(7)
	const n = 1 << 20
	g, u := make([]float32, n+5), randSlice(r, n+5, 2)
	for i := range g {
		switch i % 8 {
		case 0, 1, 2, 3, 4:
			g[i] = float32(r.Float64()*60 - 30) // ±30
		case 5:
			g[i] = float32(r.NormFloat64() * 4)
		case 6:
			g[i] = math.Float32frombits(r.Uint32()) // any bits: NaN, Inf, huge, subnormal
		default:
			g[i] = float32(r.Float64()*2e-3 - 1e-3)
		}
	}
	edges := []float32{30, -30, math.Nextafter32(30, 31), math.Nextafter32(-30, -31), 0, float32(math.Copysign(0, -1)),
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 17.5, -17.5, 88.7, -88.7, 709, -709, 745, -745, 1e30, -1e30}
	for k, e := range edges {
		g[8*k+3] = e // one edge in each of the first groups
		g[n-k] = e   // and in the tail
	}
	want := make([]float32, len(g))
	for i := range g {
		want[i] = SiLU(g[i]) * u[i]
	}
	forEachImpl(t, func(t *testing.T) {
		got := make([]float32, len(g))
		SwiGLU(got, g, u)
		if diff := cmp.Diff(bitsOf(want), bitsOf(got)); diff != "" {
			t.Errorf("SwiGLU vs SiLU(g)·u (-scalar +%s):\n%s", Impl(), diff)
		}
		inPlace := append([]float32(nil), g...)
		SwiGLU(inPlace, inPlace, u)
		if diff := cmp.Diff(bitsOf(want), bitsOf(inPlace)); diff != "" {
			t.Errorf("SwiGLU in place vs SiLU(g)·u (-scalar +%s):\n%s", Impl(), diff)
		}
	})
}

// BenchmarkSwiGLU times the gated activation of a decode batch of eight
// rows of an MLP 6,144 wide (values within ±8) on one thread.
func BenchmarkSwiGLU(b *testing.B) {
	r := newRand(8)
	const n = 8 * 6144
	g, u := randSlice(r, n, 8), randSlice(r, n, 2)
	dst := make([]float32, n)
	defer SetThreads(SetThreads(1))
	for b.Loop() {
		SwiGLU(dst, g, u)
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/n*1e9, "ns/value")
}

// TestSwiGLUThreads: a vector long enough to be split across threads gets
// the bits of one thread on two and three, in place too, and allocates
// nothing once the workers run.
func TestSwiGLUThreads(t *testing.T) {
	r := newRand(6)
	const n = 50_001
	g, u := randSlice(r, n, 6), randSlice(r, n, 2)
	want := make([]float32, n)
	defer SetThreads(SetThreads(1))
	SwiGLU(want, g, u)
	for _, threads := range []int{2, 3} {
		SetThreads(threads)
		got := make([]float32, n)
		SwiGLU(got, g, u)
		if diff := cmp.Diff(bitsOf(want), bitsOf(got)); diff != "" {
			t.Errorf("%d threads vs one (-one +%d):\n%s", threads, threads, diff)
		}
		inPlace := append([]float32(nil), g...)
		SwiGLU(inPlace, inPlace, u)
		if diff := cmp.Diff(bitsOf(want), bitsOf(inPlace)); diff != "" {
			t.Errorf("%d threads in place vs one (-one +in place):\n%s", threads, diff)
		}
		if a := testing.AllocsPerRun(20, func() { SwiGLU(got, g, u) }); a != 0 {
			t.Errorf("%d threads: SwiGLU allocates %v times per call", threads, a)
		}
	}
}
