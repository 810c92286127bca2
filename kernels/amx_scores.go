package kernels

import "github.com/cpmla/cpmla/internal/freelist"

// The lightning indexer's scores on AMX tiles (the avx512-amx
// implementation), for keys whose values are exact in bf16: fp8 keys times
// power-of-two scales, as a cache of fp8 indexer keys decodes them.
//
// A key's score is Σ_h w[h]·max(0, q_h·k). Every query value is split
// exactly into three bf16 pieces (bf16Pieces) and every key value is its
// own bf16, so a head's dot product is the sum of three exact float32
// products per value, k·hi, k·mid and k·lo, and agrees with the float64
// formula as closely as a float32 dot product does. The tiles add 32 keys ×
// 32 heads of sums chunk by chunk; a row of sums belongs to one key, so a
// key's score depends only on the query and that key, never on the other
// keys of the call or on the thread that scores it. The heads' terms are
// then summed lane-wise (head h in lane h mod 16) and the lanes by a fixed
// tree, as the AVX-512 tiles do. Keys of any other float32 values are
// scored by the AVX-512 tiles: splitting them into pieces, once per query
// and key, costs what the tiles save.

// amxScoreMaxDim is the widest query head (values) scored on AMX tiles:
// the conversion space of a call holds two tiles of 32 keys.
const amxScoreMaxDim = 256

// amxScoreTileKeys is the number of keys of a score tile.
const amxScoreTileKeys = 32

// amxScoresFit reports whether keys of dim values can be scored on AMX
// tiles: whole chunks of 32 values, at most amxScoreMaxDim.
func amxScoresFit(dim int) bool { return dim > 0 && dim%32 == 0 && dim <= amxScoreMaxDim }

// amxScoreQueryWords is the length of a query's pieces (ScoreQuery.qB): for
// each group of 32 heads, chunk of 32 values and half of the group, three
// tiles of sixteen pair rows × sixteen heads.
func amxScoreQueryWords(heads, dim int) int { return 3 * paddedHeads(heads) * dim }

// amxScores reports whether sq scores keys exact in bf16 on AMX tiles.
func (sq *ScoreQuery) amxScores() bool {
	return sq.c.amx && sq.c.l == levelAVX512 && amxScoresFit(sq.dim)
}

// prepareAMX writes the query's pieces into qB: head h of group h/32 and
// half h%32/16 in dword column h%16 of its tiles, the pair row i of a chunk
// holding values i and i+16; padded heads are zero.
func (sq *ScoreQuery) prepareAMX() {
	dim := sq.dim
	chunks := dim / 32
	sq.qB = sq.qB[:amxScoreQueryWords(sq.heads, dim)]
	clear(sq.qB)
	const tile, chunk = 512, 6 * 512 // words
	for h := range sq.heads {
		b := (h/32)*chunks*chunk + (h%32/16)*3*tile + 2*(h%16)
		amxPiecesRow(sq.q[h*dim:(h+1)*dim], sq.qB[b:], sq.qB[b+tile:], sq.qB[b+2*tile:], 64, 64, 2*chunk)
	}
}

// amxScoreScratch is one scoring call's bf16 keys (two tiles), its four
// sum tiles and the keys' running sums, and a short last tile's keys and
// scores.
type amxScoreScratch struct {
	kp  [2 * amxScoreTileKeys * amxScoreMaxDim]uint16
	cs  [4*16*16 + amxScoreTileKeys*16]float32
	hdr [amxScoreTileKeys][]float32
	out [amxScoreTileKeys]float32
}

var amxScoreScratches = freelist.New[amxScoreScratch](8, nil)

// scoreKeysAMX scores keys exact in bf16 against sq on AMX tiles on the
// calling thread: whole tiles in one call, a short last tile with its last
// key repeated.
func scoreKeysAMX(dst []float32, sq *ScoreQuery, keys [][]float32) {
	n := len(keys)
	if n == 0 {
		return
	}
	s := amxScoreScratches.Get()
	groups, chunks := len(sq.wP)/32, sq.dim/32
	const tk = amxScoreTileKeys
	whole := n / tk
	if whole > 0 {
		amxScoreTiles(&sq.qB[0], groups, chunks, &sq.wP[0], &keys[0], whole, &s.kp[0], &s.cs[0], &dst[0])
	}
	if r := n - tk*whole; r > 0 {
		for c := range s.hdr {
			s.hdr[c] = keys[tk*whole+min(c, r-1)]
		}
		amxScoreTiles(&sq.qB[0], groups, chunks, &sq.wP[0], &s.hdr[0], 1, &s.kp[0], &s.cs[0], &s.out[0])
		copy(dst[tk*whole:], s.out[:r])
		clear(s.hdr[:])
	}
	amxScoreScratches.Put(s)
}
