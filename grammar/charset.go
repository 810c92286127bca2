package grammar

import (
	"slices"
	"unicode"
	"unicode/utf8"
)

// charset is a set of Unicode scalar values: sorted, disjoint, non-adjacent
// closed ranges.
type charset []runeRange

type runeRange struct{ lo, hi rune }

const (
	maxRune      = unicode.MaxRune
	surrogateMin = 0xD800
	surrogateMax = 0xDFFF
)

func singleChar(r rune) charset { return charset{{r, r}} }

func charRange(lo, hi rune) charset { return charset{{lo, hi}}.normalize() }

// anyChar is every scalar value.
func anyChar() charset { return charset{{0, surrogateMin - 1}, {surrogateMax + 1, maxRune}} }

// normalize sorts and merges the ranges and removes surrogates.
func (c charset) normalize() charset {
	rs := slices.Clone(c)
	slices.SortFunc(rs, func(a, b runeRange) int { return int(a.lo - b.lo) })
	var out charset
	for _, r := range rs {
		if r.lo > r.hi {
			continue
		}
		// Cut out the surrogates.
		if r.lo <= surrogateMax && r.hi >= surrogateMin {
			if r.lo < surrogateMin {
				out = appendMerged(out, runeRange{r.lo, surrogateMin - 1})
			}
			if r.hi > surrogateMax {
				out = appendMerged(out, runeRange{surrogateMax + 1, r.hi})
			}
			continue
		}
		out = appendMerged(out, r)
	}
	return out
}

func appendMerged(out charset, r runeRange) charset {
	if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
		out[n-1].hi = max(out[n-1].hi, r.hi)
		return out
	}
	return append(out, r)
}

func (c charset) union(d charset) charset { return append(slices.Clone(c), d...).normalize() }

// negate is every scalar value not in c.
func (c charset) negate() charset {
	var out charset
	next := rune(0)
	for _, r := range c {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= maxRune {
		out = append(out, runeRange{next, maxRune})
	}
	return out.normalize()
}

func (c charset) intersect(d charset) charset { return c.negate().union(d.negate()).negate() }

func (c charset) minus(d charset) charset { return c.intersect(d.negate()) }

func fromTable(t *unicode.RangeTable) charset {
	var out charset
	for _, r := range t.R16 {
		for lo := rune(r.Lo); lo <= rune(r.Hi); lo += rune(r.Stride) {
			if r.Stride == 1 {
				out = append(out, runeRange{lo, rune(r.Hi)})
				break
			}
			out = append(out, runeRange{lo, lo})
		}
	}
	for _, r := range t.R32 {
		for lo := rune(r.Lo); lo <= rune(r.Hi); lo += rune(r.Stride) {
			if r.Stride == 1 {
				out = append(out, runeRange{lo, rune(r.Hi)})
				break
			}
			out = append(out, runeRange{lo, lo})
		}
	}
	return out.normalize()
}

// utf8Expr matches the UTF-8 encoding of one character of c. The byte
// range sequences are merged into a trie on their leading ranges, so a
// large class (\p{L}) stays a small automaton.
func utf8Expr(c charset) *expr {
	var seqs [][][2]byte
	for _, r := range c {
		// Split at the encoding-length boundaries.
		for _, b := range [...]rune{0x7F, 0x7FF, 0xFFFF, maxRune} {
			lo := r.lo
			if lo > b {
				continue
			}
			hi := min(r.hi, b)
			seqs = utf8Ranges(seqs, lo, hi)
			if r.hi <= b {
				break
			}
			r.lo = b + 1
		}
	}
	return rangeTrie(seqs)
}

// rangeTrie matches any of seqs (byte-range sequences; sequences with
// equal leading ranges have equal lengths, as UTF-8's do).
func rangeTrie(seqs [][][2]byte) *expr {
	if len(seqs) == 0 {
		return nothingExpr
	}
	if len(seqs[0]) == 0 {
		return emptyExpr
	}
	var firsts [][2]byte
	groups := map[[2]byte][][][2]byte{}
	for _, s := range seqs {
		f := s[0]
		if _, ok := groups[f]; !ok {
			firsts = append(firsts, f)
		}
		groups[f] = append(groups[f], s[1:])
	}
	alts := make([]*expr, 0, len(firsts))
	for _, f := range firsts {
		alts = append(alts, seq(bytesExpr(byteRange(f[0], f[1])), rangeTrie(groups[f])))
	}
	return alt(alts...)
}

// utf8Ranges appends the byte-range sequences that encode lo … hi, all of
// one encoded length.
func utf8Ranges(seqs [][][2]byte, lo, hi rune) [][][2]byte {
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				seqs = utf8Ranges(seqs, lo, lo|m)
				return utf8Ranges(seqs, (lo|m)+1, hi)
			}
			if hi&m != m {
				seqs = utf8Ranges(seqs, lo, (hi&^m)-1)
				return utf8Ranges(seqs, hi&^m, hi)
			}
		}
	}
	var a, b [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	s := make([][2]byte, n)
	for i := range n {
		s[i] = [2]byte{a[i], b[i]}
	}
	return append(seqs, s)
}
