package plan

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "413138944", want: 413138944},
		{in: "413,138,944", want: 413138944},
		{in: "413_138_944 B", want: 413138944},
		{in: "394MiB", want: 394 * MiB},
		{in: "394 mib", want: 394 * MiB},
		{in: "1KiB", want: 1024},
		{in: "2TiB", want: 2 * TiB},
		{in: "1KB", want: 1000},
		{in: "2GB", want: 2_000_000_000},
		{in: "1.5TB", want: 1_500_000_000_000},
		{in: "0.5B", want: 1}, // a unit allows fractions; 0.5 B rounds half up to 1
		// 161.16 GiB = 16116 × 2^30 / 100 = 173,044,232,355.84 B, rounded to the nearest byte.
		{in: "161.16GiB", want: 173044232356},
		{in: " 6.15 GiB ", want: 6603512218}, // 615 × 2^30 / 100 = 6,603,512,217.6
		{in: "", wantErr: "empty"},
		{in: "GiB", wantErr: "does not start with a number"},
		{in: "-1GiB", wantErr: "does not start with a number"},
		{in: "12 parsecs", wantErr: "unknown unit"},
		{in: "1.5", wantErr: "whole number"},
		{in: "1..5GiB", wantErr: "more than one decimal point"},
		{in: ",5", wantErr: "edge"},
		{in: "1.2,5GiB", wantErr: "after the decimal point"},
		{in: ".", wantErr: "no digits"},
		{in: "9223372036854775808", wantErr: "larger than"},
		{in: "9223372036854775807", want: 9223372036854775807},
		{in: "8EiB", wantErr: "unknown unit"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSize(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseSize(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestFormatBytesRoundTrip(t *testing.T) {
	for _, v := range []int64{0, 7, 999, 1000, 413138944, 2561671168, -3468186092, 9223372036854775807} {
		s := FormatBytes(v)
		if v < 0 {
			if !strings.HasPrefix(s, "-") {
				t.Errorf("FormatBytes(%d) = %q, want a leading minus", v, s)
			}
			continue
		}
		got, err := ParseSize(s)
		if err != nil || got != v {
			t.Errorf("ParseSize(FormatBytes(%d) = %q) = %d, %v", v, s, got, err)
		}
	}
	if diff := cmp.Diff("2,561,671,168 B", FormatBytes(2561671168)); diff != "" {
		t.Errorf("FormatBytes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("-3.23 GiB", FormatGiB(-3468186092)); diff != "" { // −3.23 × 2^30 = −3,468,186,091.52
		t.Errorf("FormatGiB (-want +got):\n%s", diff)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"413138944", "394MiB", "161.16 GiB", "2GB", "1,024", "0.5B", "1e9", "-1", "", "GiB", "1..2KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			return
		}
		if v < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", s, v)
		}
		// Exact byte counts survive a format/parse round trip.
		back, err := ParseSize(FormatBytes(v))
		if err != nil || back != v {
			t.Fatalf("round trip of %d via %q: %d, %v", v, FormatBytes(v), back, err)
		}
		// Adding the unit B never changes a plain byte count.
		if b, err := ParseSize(s + "B"); err == nil && !strings.ContainsAny(strings.ToLower(s), "kmgtb") && b != v {
			t.Fatalf("ParseSize(%q) = %d but ParseSize(%q) = %d", s, v, s+"B", b)
		}
	})
}
