package pyfmt

import (
	"math"
	"testing"
)

// The expected strings are what CPython 3 prints for repr(f) and
// json.dumps(s, ensure_ascii=…).
func TestFloatRepr(t *testing.T) {
	cases := map[float64]string{1: "1.0", 0.1: "0.1", 1e16: "1e+16", 1e15: "1000000000000000.0", 1234567.5: "1234567.5",
		1.5e-5: "1.5e-05", 0.0001: "0.0001", -2.5e100: "-2.5e+100", 5e-324: "5e-324", math.Copysign(0, -1): "-0.0",
		math.Inf(-1): "-inf", 0.30000000000000004: "0.30000000000000004", 123456789012345680: "1.2345678901234568e+17"}
	for f, want := range cases {
		if got := FloatRepr(f); got != want {
			t.Errorf("FloatRepr(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestJSONString(t *testing.T) {
	cases := []struct {
		in    string
		ascii bool
		want  string
	}{
		{"a\"b\\c\n\t\x01\x7f", false, `"a\"b\\c\n\t\u0001` + "\x7f" + `"`},
		{"é😀\u2028", false, "\"é😀\u2028\""},
		{"é😀", true, `"\u00e9\ud83d\ude00"`},
		{"bad\xffbyte", false, "\"bad\uFFFDbyte\""},
	}
	for _, c := range cases {
		if got := string(AppendJSONString(nil, c.in, c.ascii)); got != c.want {
			t.Errorf("AppendJSONString(%q, %v) = %s, want %s", c.in, c.ascii, got, c.want)
		}
	}
}
