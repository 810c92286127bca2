//go:build !amd64

package kernels

import "errors"

// On architectures without assembly kernels only the reference exists; the
// dispatching kernels never reach the functions below because activeLevel
// is always levelRef here.

func supported(l level) bool { return l == levelRef }

func bestLevel() level { return levelRef }

func vecWidth(level) int { return 1 }

func maxTileRows(level) int { return 1 }

func dotTileF32(level, int, *float32, int, *float32, *float32, *float32, *float32, int, *[24]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTileBF16(level, int, *float32, int, *uint16, *uint16, *uint16, *uint16, int, *[24]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func axpyTile(level, int, *float32, int, *float32, int, *[]float32, int, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func vecMax(level, []float32) float32 {
	panic("kernels: no assembly tiles on this architecture")
}

func expSum(level, []float32, float32) float32 {
	panic("kernels: no assembly tiles on this architecture")
}

func fmaPeak(int) float64 { return 0 }

func fp8DecodePeak(int) float64 { return 0 }

func fp8ProductPeak(int, int) float64 { return 0 }

func readSum([]float32) (float32, bool) { return 0, false }

func readPairSum(_, _ []float32) (float32, bool) { return 0, false }

func streamFMA([]float32, int) (float32, bool) { return 0, false }

func qkTileT(*float32, int, int, *float32, *float32, *float32, *float32, *float32, int, int, int, float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func prefetchRows(*float32, *float32, *float32, *float32, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func axpyTileBF16(level, int, *float32, int, *float32, int, *[]uint16, int, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func qkTileTBF16(*float32, int, int, *uint16, *uint16, *uint16, *uint16, *float32, int, int, int, float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func prefetchRowsBF16(*uint16, *uint16, *uint16, *uint16, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x8F32(level, *float32, *float32, int, int, *[8]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x8BF16(level, *float32, *uint16, int, int, *[8]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func axpyFast(float32, []float32, []float32) bool { return false }

func dotTile1x8FP8(*float32, *uint8, int, int, *[8]*float32, int, int, *[8]float32) bool {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x8FP8Finite(*float32, *uint8, int, int, *[8]*float32, int, int, *[8]float32, bool) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x4FP8(*float32, *uint8, int, int, *[4]*float32, int, int, *[4]float32) bool {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x16FP8(*float32, *float32, *uint8, *uint8, int, int, *[2]*float32, int, int, int, *[16]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x16FP8Prescaled(*float32, *float32, *uint8, *uint8, int, int, int, int, *[16]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTileFP8Rows8(int, *float32, int, *uint8, int, int, *float32, int, int, []float32, int, bool) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTileFP8Rows3(int, *float32, int, *uint8, int, int, *[3]*float32, int, int, []float32, int, bool) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTileFP8Rows(int, *float32, int, *uint8, int, int, *[4]*float32, int, int, []float32, int, bool, bool) bool {
	panic("kernels: no assembly tiles on this architecture")
}

func decodeFP8Row(level, *float32, *uint8, int, *float32, int, *uint8) bool {
	panic("kernels: no assembly tiles on this architecture")
}

func decodeE4M3Fast([]float32, []byte, float32) int { return 0 }

func scoreTile8T(*float32, int, int, *float32, *float32, *float32, *float32, *float32, *float32, *float32, *float32, *float32, *[8]*float32, *float32, *float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func scoreTiles8T32(*float32, int, *float32, *[]float32, *[]float32, *float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func siluMul([]float32, []float32, []float32) int {
	panic("kernels: no assembly tiles on this architecture")
}

func expShifted([]float64, []float32, float64, float64) int {
	panic("kernels: no assembly tiles on this architecture")
}

func widenBF16Fast([]float32, []byte) int { return 0 }

func transpose16(*float32, int, *float32, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func scaleVec(_ level, x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}

func qkTileT8(*float32, int, int, *[8]*float32, *float32, int, int, int, float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func qkTileT8BF16(*float32, int, int, *[8]*uint16, *float32, int, int, int, float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func decodeRecordsFast([]float32, []byte, RecordLayout, []int32, int, int) bool { return false }

func stripF32(level, int, *float32, int, *float32, int, int, int, *float32, int, int, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func tileF32x8(int, *float32, int, *float32, int, int, *float32, int, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func widenIlvGroup(*float32, int, *uint16, int, *uint16) {
	panic("kernels: no assembly tiles on this architecture")
}

func stripBF16(level, int, *float32, int, *uint16, int, int, int, *float32, int, int, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func scoreTile6T(*float32, int, int, *float32, *float32, *float32, *float32, *float32, *float32, *float32, *[6]*float32, *float32, *float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func stripBF16Ilv(int, *float32, int, *uint16, int, int, *float32, int, int, int, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func groupBF16Ilv(int, *float32, int, *uint16, int, *float32, int, int, int, int, *groupAcc, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func pairBF16Ilv(*float32, int, *uint16, int, *float32, int, int, int, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x8BF16Ilv(*float32, *uint16, int, *[8]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x16BF16Ilv(*float32, *uint16, *uint16, int, *[16]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func topkKeepFast(*[topkCandMax]uint32, []float32, float32) (int, int) { return 0, 0 }

func enableAMX() error { return errors.New("AMX tiles need amd64") }

func amxSlab(int, *uint16, int, int, int, *uint16, int, []amxSums, bool) {
	panic("kernels: no assembly tiles on this architecture")
}

func amxPiecesRow([]float32, []uint16, []uint16, []uint16, int, int, int) {
	panic("kernels: no assembly tiles on this architecture")
}

func amxScoreTiles(*uint16, int, int, *float32, *[]float32, int, *uint16, *float32, *float32) {
	panic("kernels: no assembly tiles on this architecture")
}

// cpuVendor is empty off amd64: no walk chooses by it there.
var cpuVendor = ""

func dotTile1x16FP8Ilv(*float32, *float32, *uint8, *uint8, int, *[2]*float32, int, int, int, *[16]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTile1x16FP8PrescaledIlv(*float32, *float32, *uint8, *uint8, int, int, int, *[16]float32) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTileFP8Rows8Ilv(int, *float32, int, *uint8, int, *float32, int, int, []float32, int, bool) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTileFP8RowsIlv(int, *float32, int, *uint8, int, *[4]*float32, int, int, []float32, int, bool) {
	panic("kernels: no assembly tiles on this architecture")
}

func dotTileFP8Rows3Ilv(int, *float32, int, *uint8, int, int, int, *[3]*float32, int, int, []float32, int, bool) {
	panic("kernels: no assembly tiles on this architecture")
}

func decodeFP8RowIlv(*float32, *uint8, int, *float32, int, *uint8) {
	panic("kernels: no assembly tiles on this architecture")
}
