package grammar

import (
	"math/big"
	"strings"
)

// JSON numbers with bounds: the strings of canonical decimals (no leading
// zeros, no exponent) whose value lies in the bounds form a regular
// language; ge and le build it digit by digit.

// decimal is an exact non-negative decimal: integer digits (canonical,
// "0" for zero) and fraction digits (no trailing zeros).
type decimal struct{ intPart, frac string }

// maxBoundDigits bounds the digits of a bound's decimal expansion.
const maxBoundDigits = 200

// decimalOf writes r as a decimal; ok is false for values with more than
// maxBoundDigits digits.
func decimalOf(r *big.Rat) (neg bool, d decimal, ok bool) {
	neg = r.Sign() < 0
	abs := new(big.Rat).Abs(r)
	num, den := new(big.Int).Set(abs.Num()), abs.Denom()
	ten := big.NewInt(10)
	k := 0
	rem := new(big.Int)
	for {
		q, m := new(big.Int).QuoRem(num, den, rem)
		if m.Sign() == 0 {
			num = q
			break
		}
		if k >= maxBoundDigits {
			return false, decimal{}, false
		}
		num.Mul(num, ten)
		k++
	}
	s := num.String()
	if len(s) > maxBoundDigits {
		return false, decimal{}, false
	}
	for len(s) <= k {
		s = "0" + s
	}
	d.intPart = strings.TrimLeft(s[:len(s)-k], "0")
	if d.intPart == "" {
		d.intPart = "0"
	}
	d.frac = strings.TrimRight(s[len(s)-k:], "0")
	return neg, d, true
}

var (
	digitExpr   = bytesExpr(byteRange('0', '9'))
	nonzeroExpr = bytesExpr(byteRange('1', '9'))
	fracAnyExpr = opt(seq(lit("."), plus(digitExpr)))
	// unsignedExpr is any canonical unsigned decimal.
	unsignedExpr = seq(alt(lit("0"), seq(nonzeroExpr, star(digitExpr))), fracAnyExpr)
)

func digitsFrom(lo, hi byte) *expr {
	if lo > hi {
		return nothingExpr
	}
	return bytesExpr(byteRange(lo, hi))
}

// uge: unsigned canonical decimals ≥ a (> a unless incl).
func uge(a decimal, incl bool) *expr {
	if a.intPart == "0" {
		return alt(seq(nonzeroExpr, star(digitExpr), fracAnyExpr), seq(lit("0"), fracGE(a.frac, incl)))
	}
	n := len(a.intPart)
	var eq func(k int) *expr
	eq = func(k int) *expr {
		if k == n {
			return fracGE(a.frac, incl)
		}
		rest := n - k - 1
		greater := seq(digitsFrom(a.intPart[k]+1, '9'), repeat(digitExpr, rest, rest), fracAnyExpr)
		return alt(greater, seq(lit(a.intPart[k:k+1]), eq(k+1)))
	}
	return alt(seq(nonzeroExpr, repeat(digitExpr, n, -1), fracAnyExpr), eq(0))
}

// fracGE: after an integer part equal to the bound's, the fractions that
// make the value ≥ (or >) the bound.
func fracGE(f string, incl bool) *expr {
	if f == "" {
		if incl {
			return fracAnyExpr
		}
		return seq(lit("."), star(lit("0")), nonzeroExpr, star(digitExpr))
	}
	var at func(k int) *expr
	at = func(k int) *expr {
		if k == len(f) {
			if incl {
				return star(digitExpr)
			}
			return seq(star(lit("0")), nonzeroExpr, star(digitExpr))
		}
		greater := seq(digitsFrom(f[k]+1, '9'), star(digitExpr))
		return alt(greater, seq(lit(f[k:k+1]), at(k+1)))
	}
	return seq(lit("."), at(0))
}

// ule: unsigned canonical decimals ≤ b (< b unless incl).
func ule(b decimal, incl bool) *expr {
	if b.intPart == "0" {
		return seq(lit("0"), fracLE(b.frac, incl))
	}
	n := len(b.intPart)
	alts := []*expr{seq(lit("0"), fracAnyExpr)}
	if n >= 2 {
		alts = append(alts, seq(nonzeroExpr, repeat(digitExpr, 0, n-2), fracAnyExpr))
	}
	var eq func(k int) *expr
	eq = func(k int) *expr {
		if k == n {
			return fracLE(b.frac, incl)
		}
		lo := byte('0')
		if k == 0 {
			lo = '1'
		}
		rest := n - k - 1
		less := seq(digitsFrom(lo, b.intPart[k]-1), repeat(digitExpr, rest, rest), fracAnyExpr)
		return alt(less, seq(lit(b.intPart[k:k+1]), eq(k+1)))
	}
	return alt(append(alts, eq(0))...)
}

// fracLE: after an integer part equal to the bound's, the fractions (or
// none) that keep the value ≤ (or <) the bound.
func fracLE(f string, incl bool) *expr {
	none := emptyExpr // the integer part alone: less unless f is empty
	if f == "" && !incl {
		none = nothingExpr
	}
	var at func(k int) *expr
	at = func(k int) *expr {
		if k == len(f) {
			switch {
			case !incl:
				return nothingExpr
			case k == 0:
				return plus(lit("0"))
			}
			return star(lit("0"))
		}
		end := nothingExpr
		if k >= 1 {
			end = emptyExpr
		}
		less := seq(digitsFrom('0', f[k]-1), star(digitExpr))
		return alt(end, less, seq(lit(f[k:k+1]), at(k+1)))
	}
	return alt(none, seq(lit("."), at(0)))
}

// positiveExpr is every canonical unsigned decimal above zero.
var positiveExpr = uge(decimal{intPart: "0"}, false)

// geExpr: signed decimals ≥ (or >) v.
func geExpr(neg bool, d decimal, incl bool) *expr {
	if !neg {
		return uge(d, incl)
	}
	// -U ≥ -d ⟺ U ≤ d; any non-negative value is larger.
	return alt(unsignedExpr, seq(lit("-"), ule(d, incl)))
}

// leExpr: signed decimals ≤ (or <) v.
func leExpr(neg bool, d decimal, incl bool) *expr {
	if !neg {
		return alt(seq(lit("-"), positiveExpr), ule(d, incl))
	}
	return seq(lit("-"), uge(d, incl))
}

// numberShape is the JSON number syntax with at most intDigits integer
// and fracDigits fraction digits (integers only with fracDigits 0), and an
// optional exponent of up to two digits.
func numberShape(intDigits, fracDigits int, exponent bool) *expr {
	e := seq(opt(lit("-")), alt(lit("0"), seq(nonzeroExpr, repeat(digitExpr, 0, intDigits-1))))
	if fracDigits > 0 {
		e = seq(e, opt(seq(lit("."), repeat(digitExpr, 1, fracDigits))))
	}
	if exponent {
		e = seq(e, opt(seq(bytesExpr(setOf("eE")), opt(bytesExpr(setOf("+-"))), repeat(digitExpr, 1, 2))))
	}
	return e
}

func setOf(s string) byteSet {
	var b byteSet
	for i := range len(s) {
		b.add(s[i])
	}
	return b
}
