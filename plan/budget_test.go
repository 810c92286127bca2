package plan

import (
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// floorRat computes ⌊u × d⌋ exactly from the decimal spelling of u, an
// independent check of the float arithmetic in requested().
func floorRat(t *testing.T, u string, d int64) int64 {
	t.Helper()
	r, ok := new(big.Rat).SetString(u)
	if !ok {
		t.Fatalf("bad rational %q", u)
	}
	r.Mul(r, new(big.Rat).SetInt64(d))
	return new(big.Int).Quo(r.Num(), r.Denom()).Int64()
}

func TestBudgetCompute(t *testing.T) {
	b200 := gibBytes(178.35)
	tests := []struct {
		name string
		b    Budget
		u    string // Utilization spelled exactly
		want BudgetResult
	}{
		{
			name: "positive budget, block rounding, DCP4",
			b: Budget{DeviceBytes: 100 * GiB, NonKVBytes: 60 * GiB, GraphBytes: 2 * GiB, OutsideBytes: GiB,
				SlotBytes: 78 * (656 + 132), DCP: 4, BlockSize: 64, MaxModelLen: 131072},
			u: "0.9",
		},
		{
			name: "negative budget",
			b: Budget{DeviceBytes: b200, NonKVBytes: 173044232356, GraphBytes: 6603512218,
				SlotBytes: 78 * (656 + 132), DCP: 4, BlockSize: 64, MaxModelLen: 4096},
			u: "0.92",
		},
		{
			name: "no block rounding, interleave 16, DCP 3",
			b: Budget{DeviceBytes: 64 * GiB, NonKVBytes: 10 * GiB, SlotBytes: 2 * (2304 + 512), DCP: 3, Interleave: 16,
				BlockSize: 1, MaxModelLen: 4096},
			u: "0.5",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.b
			u, _ := new(big.Rat).SetString(tt.u)
			b.Utilization, _ = u.Float64()
			if err := b.Validate(); err != nil {
				t.Fatal(err)
			}
			got := b.Compute()
			// Each line of the arithmetic, recomputed here from its definition.
			req := floorRat(t, tt.u, b.DeviceBytes)
			kv := req - b.NonKVBytes - b.GraphBytes
			blk := int64(max(b.BlockSize, 1))
			var perRank int64
			if kv > 0 {
				perRank = (kv / b.SlotBytes) / blk * blk
			}
			// Rank 0 owns the most tokens of a request; count them one by one.
			i := int64(max(b.Interleave, 1))
			var own int64
			for p := int64(0); p < int64(b.MaxModelLen); p++ {
				if (p/i)%int64(b.DCP) == 0 {
					own++
				}
			}
			slots := (own + blk - 1) / blk * blk
			if got.RequestedBytes != req || got.KVBudgetBytes != kv || got.KVTokensPerRank != perRank ||
				got.ContextTokens != perRank*int64(b.DCP) || got.RequestSlots != slots || got.RequestKVBytes != slots*b.SlotBytes ||
				got.HeadroomBytes != b.DeviceBytes-req-b.OutsideBytes {
				t.Errorf("integer lines: got %+v; want requested %d, budget %d, tokens/rank %d, slots %d", got, req, kv, perRank, slots)
			}
			approx := cmpopts.EquateApprox(0, 1e-12)
			wantF := []float64{
				float64(b.SlotBytes) / float64(b.DCP),
				float64(perRank*int64(b.DCP)) / float64(b.MaxModelLen),
				math.Min(math.Round((b.Utilization+float64(b.GraphBytes)/float64(b.DeviceBytes))*1e4)/1e4, 1),
			}
			gotF := []float64{got.KVBytesPerToken, got.MaxConcurrency, got.RecommendedUtilization}
			if diff := cmp.Diff(wantF, gotF, approx); diff != "" {
				t.Errorf("per-token bytes, concurrency, recommended utilization (-want +got):\n%s", diff)
			}
			// MinUtilization is minimal in 0.0001 steps: it fits, one step less does not.
			need := b.NonKVBytes + b.GraphBytes + got.RequestKVBytes
			if u := got.MinUtilization; requested(b.DeviceBytes, u) < need || requested(b.DeviceBytes, u-1e-4) >= need {
				t.Errorf("MinUtilization %.4f is not the least step: %d / %d", u, requested(b.DeviceBytes, u), need)
			}
			if d := got.MinDeviceBytes; requested(d, b.Utilization) < need || requested(d-1, b.Utilization) >= need {
				t.Errorf("MinDeviceBytes %d is not the least size for %d", d, need)
			}
			// MaxModelLenFit is the longest request that fits per rank.
			if l := got.MaxModelLenFit; l > 0 {
				fit := func(s int64) bool { return roundUp(MaxLocalTokens(s, b.DCP, b.Interleave), blk) <= perRank }
				if !fit(l) || fit(l+1) {
					t.Errorf("MaxModelLenFit %d is not the longest fitting length", l)
				}
			} else if perRank >= blk {
				t.Errorf("MaxModelLenFit = 0 with %d slots per rank", perRank)
			}
		})
	}
}

func TestMaxLocalTokensCountsOwnership(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 8} {
		for _, i := range []int{1, 2, 4, 16} {
			for s := int64(0); s <= 200; s++ {
				counts := make([]int64, n)
				for p := int64(0); p < s; p++ {
					counts[(p/int64(i))%int64(n)]++
				}
				var most int64
				for _, c := range counts {
					most = max(most, c)
				}
				if got := MaxLocalTokens(s, n, i); got != most || counts[0] != most {
					t.Fatalf("MaxLocalTokens(%d, N=%d, I=%d) = %d, counted %v", s, n, i, got, counts)
				}
			}
		}
	}
}

func TestMaxUtilizationFor(t *testing.T) {
	b := Budget{DeviceBytes: gibBytes(178.35), Utilization: 0.92, OutsideBytes: gibBytes(6.668)}
	req := gibBytes(12.22)
	u := b.MaxUtilizationFor(req)
	// 1 − (12.22 + 6.668)/178.35 = 0.89409…, floored to 4 decimals.
	if diff := cmp.Diff(0.894, u, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("MaxUtilizationFor (-want +got):\n%s", diff)
	}
	free := func(u float64) int64 { return b.DeviceBytes - requested(b.DeviceBytes, u) - b.OutsideBytes }
	if free(u) < req || free(u+1e-4) >= req {
		t.Errorf("%.4f is not the largest fitting step: free %d, next %d, need %d", u, free(u), free(u+1e-4), req)
	}
	if u := (Budget{DeviceBytes: GiB, Utilization: 0.5}).MaxUtilizationFor(2 * GiB); u > 0 {
		t.Errorf("a request larger than the device gave utilization %g, want ≤ 0", u)
	}
}

func TestBudgetCheck(t *testing.T) {
	ok := Budget{DeviceBytes: 64 * GiB, Utilization: 0.9, NonKVBytes: 8 * GiB, SlotBytes: 4 * 2304, DCP: 1, BlockSize: 16, MaxModelLen: 4096}
	if err := ok.Check("--memory-utilization", "--memory-limit"); err != nil {
		t.Fatalf("fitting budget refused: %v", err)
	}
	tight := ok
	tight.NonKVBytes = 57*GiB + 900*MiB
	err := tight.Check("--memory-utilization", "--memory-limit")
	if err == nil {
		t.Fatal("budget without room for one request was accepted")
	}
	r := tight.Compute()
	for _, want := range []string{"--memory-utilization", "--memory-limit", FormatGiB(r.MinDeviceBytes), "4096-token request"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	none := ok
	none.NonKVBytes = 70 * GiB
	if err := none.Check("--memory-utilization", "--memory-limit"); err == nil || strings.Contains(err.Error(), "--memory-utilization to") {
		t.Errorf("no utilization fits, yet the refusal suggests one: %v", err)
	}
	if err := (Budget{DeviceBytes: GiB, Utilization: 1.5, SlotBytes: 1, DCP: 1, MaxModelLen: 1}).Check("u", "l"); err == nil || !strings.Contains(err.Error(), "(0, 1]") {
		t.Errorf("utilization 1.5 accepted or badly refused: %v", err)
	}
}
