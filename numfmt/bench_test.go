package numfmt

import (
	"math/rand/v2"
	"testing"
)

// reportGBs reports the bytes read plus written per second.
func reportGBs(b *testing.B, bytesPerOp int) {
	b.ReportMetric(float64(bytesPerOp)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

const benchElems = 1 << 16

func BenchmarkBF16ToF32s(b *testing.B) {
	src := make([]uint16, benchElems)
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, benchElems)
	for b.Loop() {
		BF16ToF32s(dst, src)
	}
	reportGBs(b, benchElems*(2+4))
}

func BenchmarkF32sToBF16(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	src := randomRow(r, benchElems, 1)
	dst := make([]uint16, benchElems)
	for b.Loop() {
		F32sToBF16(dst, src)
	}
	reportGBs(b, benchElems*(4+2))
}

func BenchmarkEncodeDSMLA(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	row := randomRow(r, rowDim, 1)
	rec := make([]byte, DSMLARecordBytes)
	for b.Loop() {
		EncodeDSMLA(rec, row)
	}
	reportGBs(b, rowDim*4+DSMLARecordBytes)
}

func BenchmarkDecodeDSMLA(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 3))
	rec := make([]byte, DSMLARecordBytes)
	EncodeDSMLA(rec, randomRow(r, rowDim, 1))
	row := make([]float32, rowDim)
	for b.Loop() {
		DecodeDSMLA(row, rec)
	}
	reportGBs(b, rowDim*4+DSMLARecordBytes)
}

func BenchmarkRoundDSMLA(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 4))
	row := randomRow(r, rowDim, 1)
	for b.Loop() {
		RoundDSMLA(row)
	}
	reportGBs(b, rowDim*4*2)
}

func BenchmarkEncodeIndexerKey(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 5))
	k := randomRow(r, IndexerKeyDim, 1)
	rec := make([]byte, IndexerKeyBytes)
	for b.Loop() {
		EncodeIndexerKey(rec, k)
	}
	reportGBs(b, IndexerKeyDim*4+IndexerKeyBytes)
}

func BenchmarkDecodeIndexerKey(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 6))
	rec := make([]byte, IndexerKeyBytes)
	EncodeIndexerKey(rec, randomRow(r, IndexerKeyDim, 1))
	k := make([]float32, IndexerKeyDim)
	for b.Loop() {
		DecodeIndexerKey(k, rec)
	}
	reportGBs(b, IndexerKeyDim*4+IndexerKeyBytes)
}
