package safetensors

import (
	"path/filepath"
	"testing"
)

// BenchmarkOpenF32View measures Open + Tensor + F32 view + Close of a file
// holding one 64 MiB F32 tensor. The view is zero-copy, so the reported
// GB/s (tensor bytes made available per second) is far above memory
// bandwidth: the cost is the mmap and header parse, not the data.
func BenchmarkOpenF32View(b *testing.B) {
	const bytes = 64 << 20
	path := filepath.Join(b.TempDir(), "big.safetensors")
	big := Tensor{Name: "w", DType: F32, Shape: []int{bytes / 4}, Data: make([]byte, bytes)}
	if err := Write(path, []Tensor{big, FromU8("small", []int{3}, []byte{1, 2, 3})}, nil); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		t, err := f.Tensor("w")
		if err != nil {
			b.Fatal(err)
		}
		v, err := t.F32()
		if err != nil || len(v) != bytes/4 {
			b.Fatal(len(v), err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkToF32BF16 measures the explicit bf16 → float32 conversion of a
// 4 MiB tensor (bytes read plus bytes written per second).
func BenchmarkToF32BF16(b *testing.B) {
	const n = 2 << 20
	t := FromBF16("w", []int{n}, make([]uint16, n))
	dst := make([]float32, n)
	for b.Loop() {
		if _, err := t.ToF32(dst); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*(2+4))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
