package plan

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFlashInferSparseWorkspace(t *testing.T) {
	tests := []struct {
		name              string
		headsPerRank, dcp int
		tokens            int
		want              int64
	}{
		// No DCP: no LSE is requested, so no slab.
		{"no DCP", 64, 1, 32768, DefaultFlashInferWorkspaceBytes},
		// Definition: base + 8 × (heads × DCP) × tokens × roundup(1, 256) + 1 MiB.
		{"TP8 DCP8 64 gathered heads", 8, 8, 16384, DefaultFlashInferWorkspaceBytes + 8*64*16384*256 + MiB},
		// The warm-up step of 108 tokens the GLM lane failed on asked for
		// 470,810,624 B against the 413,138,944 B buffer.
		{"GLM TP1/PCP4/DCP4, 108-token warm-up", 64, 4, 108, 470810624},
		// The GLM TP1/PCP4/DCP4 lane capped at 4,096 tokens: exactly 2,561,671,168 B.
		{"GLM TP1/PCP4/DCP4, 4096 tokens", 64, 4, 4096, 2561671168},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FlashInferSparseWorkspaceBytes(DefaultFlashInferWorkspaceBytes, tt.headsPerRank, tt.dcp, tt.tokens)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// At the previous 32,768-token scheduler cap the same lane needs 16.39 GiB.
	got := GiBOf(FlashInferSparseWorkspaceBytes(DefaultFlashInferWorkspaceBytes, 64, 4, 32768))
	if diff := cmp.Diff(16.39, got, cmpopts.EquateApprox(0, 0.005)); diff != "" {
		t.Errorf("workspace at 32768 tokens in GiB (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(int64(413138944), DefaultFlashInferWorkspaceBytes); diff != "" {
		t.Errorf("default workspace (-want +got):\n%s", diff)
	}
}

func TestLSESlabRoundsQueryLength(t *testing.T) {
	for _, c := range []struct{ q, rounded int }{{1, 256}, {256, 256}, {257, 512}, {0, 256}} {
		if got, want := LSESlabBytes(2, 3, c.q), int64(8*2*3*c.rounded)+MiB; got != want {
			t.Errorf("LSESlabBytes(q=%d) = %d, want %d", c.q, got, want)
		}
	}
}

func TestMaxTokensForWorkspace(t *testing.T) {
	for _, c := range []struct {
		configured int64
		heads      int
	}{{2561671168, 256}, {DefaultFlashInferWorkspaceBytes + 10*MiB, 64}, {DefaultFlashInferWorkspaceBytes, 256}, {GiB, 8}} {
		n := MaxTokensForWorkspace(c.configured, DefaultFlashInferWorkspaceBytes, c.heads)
		fits := func(tokens int64) bool {
			return tokens == 0 || DefaultFlashInferWorkspaceBytes+LSESlabBytes(c.heads, int(tokens), 1) <= c.configured
		}
		if !fits(n) || fits(n+1) {
			t.Errorf("MaxTokensForWorkspace(%d, %d heads) = %d is not the largest fitting count", c.configured, c.heads, n)
		}
	}
}

func TestDCPA2A(t *testing.T) {
	tests := []struct {
		name                      string
		mnbt, seqs, spec, capture int
		parallel                  bool
		wantTokens                int64
	}{
		// TP8/DCP4 GLM lane: 128 sequences × (1 + 2 × 5) = 1408 < 8192.
		{"MTP5 parallel drafting", 8192, 128, 5, 512, true, 1408},
		{"MTP5 sequential drafting", 8192, 128, 5, 512, false, 128 * 6},
		{"capture size dominates", 8192, 64, 0, 512, false, 512},
		{"batched-token cap", 1024, 128, 5, 512, true, 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DCPA2ATokens(tt.mnbt, tt.seqs, tt.spec, tt.parallel, tt.capture)
			if diff := cmp.Diff(tt.wantTokens, got); diff != "" {
				t.Errorf("tokens (-want +got):\n%s", diff)
			}
		})
	}
	// bytes = 2 × DCP × T × heads × (512 × 2 + 4).
	if got, want := DCPA2ABytes(4, 1408, 8, 512), int64(2*4*1408*8*1028); got != want {
		t.Errorf("DCPA2ABytes = %d, want %d", got, want)
	}
	// The digest's worked example: TP8/DCP8, 8 heads, 512 tokens = 67,371,008 B.
	if got := DCPA2ABytes(8, 512, 8, 512); got != 67371008 {
		t.Errorf("DCPA2ABytes(worked example) = %d, want 67371008", got)
	}
	// Sizing the GLM lane for 8,192 tokens costs about 446 MB more per rank.
	extra := DCPA2ABytes(4, 8192, 8, 512) - DCPA2ABytes(4, 1408, 8, 512)
	if diff := cmp.Diff(446.0, float64(extra)/1e6, cmpopts.EquateApprox(0, 0.5)); diff != "" {
		t.Errorf("extra MB (-want +got):\n%s", diff)
	}
	for _, c := range []struct{ seqs, spec, want int }{{256, 0, 512}, {128, 0, 256}, {16, 5, 192}, {128, 5, 512}} {
		if got := DefaultCaptureSize(c.seqs, c.spec); got != c.want {
			t.Errorf("DefaultCaptureSize(%d, %d) = %d, want %d", c.seqs, c.spec, got, c.want)
		}
	}
}
