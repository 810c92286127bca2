package plan

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"
)

// Binary and decimal size units.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// ParseSize reads a byte count: a plain number of bytes ("413138944",
// "413,138,944", "413_138_944") or a number with a unit: B, KiB, MiB, GiB,
// TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), case-insensitive,
// optionally separated by spaces ("161.16 GiB"). Fractions are allowed with
// a unit and are rounded to the nearest byte. Negative sizes, sizes beyond
// 2^63−1 bytes and fractional plain byte counts are refused.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("size is empty; write bytes (413138944) or a number with a unit (394MiB, 161.16GiB, 2GB)")
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == ',' || t[i] == '_') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q does not start with a number; write e.g. 394MiB or 413138944", s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q has unknown unit %q; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", s, t[i:])
	}
	digits, err := cleanNumber(num)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	r, ok := new(big.Rat).SetString(digits)
	if !ok {
		return 0, fmt.Errorf("size %q: %q is not a number", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if unit == "" && !r.IsInt() {
		return 0, fmt.Errorf("size %q: a plain byte count must be a whole number; add a unit (e.g. %sGiB) for fractions", s, digits)
	}
	// Round half up to the nearest byte.
	half := new(big.Rat).SetFrac64(1, 2)
	r.Add(r, half)
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return 0, fmt.Errorf("size %q is larger than %d bytes", s, int64(math.MaxInt64))
	}
	return q.Int64(), nil
}

// cleanNumber removes digit-group separators and checks the shape of a
// non-negative decimal number.
func cleanNumber(num string) (string, error) {
	var b strings.Builder
	dots := 0
	for idx, c := range num {
		switch {
		case c == ',' || c == '_':
			if idx == 0 || idx == len(num)-1 {
				return "", fmt.Errorf("digit separator %q at the edge of %q", c, num)
			}
			if dots > 0 {
				return "", fmt.Errorf("digit separator %q after the decimal point in %q", c, num)
			}
		case c == '.':
			dots++
			if dots > 1 {
				return "", fmt.Errorf("%q has more than one decimal point", num)
			}
			b.WriteRune(c)
		case unicode.IsDigit(c):
			b.WriteRune(c)
		default:
			return "", fmt.Errorf("unexpected %q in %q", c, num)
		}
	}
	out := b.String()
	if out == "." || strings.Trim(out, ".") == "" {
		return "", fmt.Errorf("%q has no digits", num)
	}
	return out, nil
}

// GiBOf converts bytes to GiB.
func GiBOf(b int64) float64 { return float64(b) / float64(GiB) }

// FormatGiB prints bytes as GiB with two decimals ("−3.23 GiB").
func FormatGiB(b int64) string { return strconv.FormatFloat(GiBOf(b), 'f', 2, 64) + " GiB" }

// FormatBytes prints an exact byte count with thousands separators
// ("2,561,671,168 B"); ParseSize reads it back.
func FormatBytes(b int64) string { return groupDigits(b) + " B" }

// groupDigits writes an integer with comma thousands separators.
func groupDigits(v int64) string {
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// MulSat multiplies non-negative sizes, saturating at math.MaxInt64 instead
// of overflowing, so that a product of absurd flag values compares as
// absurdly large; a factor ≤ 0 gives 0.
func MulSat(v ...int64) int64 {
	p := int64(1)
	for _, x := range v {
		if x <= 0 {
			return 0
		}
		if p > math.MaxInt64/x {
			return math.MaxInt64
		}
		p *= x
	}
	return p
}

// AddSat adds non-negative sizes, saturating at math.MaxInt64.
func AddSat(v ...int64) int64 {
	s := int64(0)
	for _, x := range v {
		if x > math.MaxInt64-s {
			return math.MaxInt64
		}
		s += x
	}
	return s
}
