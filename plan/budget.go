package plan

import (
	"fmt"
	"math"
)

// Budget is the device-neutral memory model: a device (a GPU, or a host
// under a memory limit) of DeviceBytes, of which the engine may use the
// Utilization fraction. Non-KV memory (weights, activation peak, persistent
// workspaces) and graph memory come out of that share; what remains is the
// KV budget, cut into whole cache blocks of token slots.
type Budget struct {
	DeviceBytes int64   // total memory of one rank's device, or the host memory limit
	Utilization float64 // fraction of DeviceBytes the engine may use, in (0, 1]
	NonKVBytes  int64   // weights + activation peak + persistent workspaces
	GraphBytes  int64   // CUDA-graph pool; 0 on CPUs
	// OutsideBytes is memory already in use outside the utilization share
	// (runtime context, communication buffers); it shrinks the headroom.
	OutsideBytes int64
	SlotBytes    int64 // KVSlotBytes: one cached token on its owner rank, all layers
	DCP          int   // decode context parallel size (ranks a context is spread over)
	Interleave   int   // cp_kv_cache_interleave_size; ≤ 1 means 1
	BlockSize    int   // tokens per KV block; capacity is whole blocks (≤ 1: no rounding)
	MaxModelLen  int   // longest request, in tokens
}

// BudgetResult is what a Budget computes to. Every field is derived from the
// Budget by Compute; see docs/planner.md for each formula.
type BudgetResult struct {
	RequestedBytes  int64   // ⌊Utilization × DeviceBytes⌋
	KVBudgetBytes   int64   // RequestedBytes − NonKVBytes − GraphBytes; may be negative
	KVBytesPerToken float64 // SlotBytes / DCP
	KVTokensPerRank int64   // token slots per rank: ⌊max(KV budget, 0) / SlotBytes⌋ in whole blocks
	ContextTokens   int64   // KVTokensPerRank × DCP: tokens of context the DCP group holds
	MaxConcurrency  float64 // ContextTokens / MaxModelLen
	// RequestSlots is the most slots one MaxModelLen request takes on any rank
	// (the rank that owns the most of it), in whole blocks.
	RequestSlots   int64
	RequestKVBytes int64 // RequestSlots × SlotBytes
	// RecommendedUtilization keeps the KV budget an engine that did not count
	// graph memory would have: min(round(U + Graph/Device, 4), 1).
	RecommendedUtilization float64
	// MinUtilization is the smallest utilization (4 decimals) whose KV budget
	// holds one MaxModelLen request; above 1 when no utilization does.
	MinUtilization float64
	// MinDeviceBytes is the smallest device size (or memory limit) that holds
	// one MaxModelLen request at this utilization.
	MinDeviceBytes int64
	// MaxModelLenFit is the longest request the KV budget holds (0 if none).
	MaxModelLenFit int64
	// HeadroomBytes is memory outside the utilization share that is still
	// free: DeviceBytes − RequestedBytes − OutsideBytes.
	HeadroomBytes int64
}

// Validate reports budget inputs that cannot describe a device.
func (b Budget) Validate() error {
	switch {
	case b.DeviceBytes <= 0:
		return fmt.Errorf("device memory must be > 0 bytes, got %d", b.DeviceBytes)
	case !(b.Utilization > 0 && b.Utilization <= 1):
		return fmt.Errorf("memory utilization must be in (0, 1], got %g; 0.9 is the usual setting", b.Utilization)
	case b.NonKVBytes < 0 || b.GraphBytes < 0 || b.OutsideBytes < 0:
		return fmt.Errorf("non-KV (%d), graph (%d) and outside (%d) memory must be ≥ 0 bytes", b.NonKVBytes, b.GraphBytes, b.OutsideBytes)
	case b.SlotBytes <= 0:
		return fmt.Errorf("KV bytes per cached token must be > 0, got %d", b.SlotBytes)
	case b.DCP < 1:
		return fmt.Errorf("decode context parallel size must be ≥ 1, got %d", b.DCP)
	case b.MaxModelLen < 1:
		return fmt.Errorf("max model length must be ≥ 1 token, got %d", b.MaxModelLen)
	}
	return nil
}

// requested is ⌊u × device⌋, the share of the device the engine may use.
func requested(device int64, u float64) int64 {
	return int64(math.Floor(u * float64(device)))
}

func (b Budget) interleave() int64 {
	if b.Interleave < 1 {
		return 1
	}
	return int64(b.Interleave)
}

func (b Budget) block() int64 {
	if b.BlockSize < 1 {
		return 1
	}
	return int64(b.BlockSize)
}

// MaxLocalTokens is the number of a request's first s tokens that its
// most-loaded DCP rank (rank 0) owns, with token p on rank ⌊p/I⌋ mod N:
// ⌊⌊s/I⌋/N⌋·I + min(s − that·N, I).
func MaxLocalTokens(s int64, dcp, interleave int) int64 {
	n, i := int64(max(dcp, 1)), int64(max(interleave, 1))
	base := (s / i) / n * i
	return base + min(max(s-base*n, 0), i)
}

// roundUp rounds v up to a multiple of m.
func roundUp(v, m int64) int64 { return (v + m - 1) / m * m }

// Compute evaluates the budget. It assumes Validate passed.
func (b Budget) Compute() BudgetResult {
	var r BudgetResult
	r.RequestedBytes = requested(b.DeviceBytes, b.Utilization)
	r.KVBudgetBytes = r.RequestedBytes - b.NonKVBytes - b.GraphBytes
	r.KVBytesPerToken = float64(b.SlotBytes) / float64(b.DCP)
	blk := b.block()
	if r.KVBudgetBytes > 0 {
		r.KVTokensPerRank = r.KVBudgetBytes / b.SlotBytes / blk * blk
	}
	r.ContextTokens = r.KVTokensPerRank * int64(b.DCP)
	r.MaxConcurrency = float64(r.ContextTokens) / float64(b.MaxModelLen)
	r.RequestSlots = roundUp(MaxLocalTokens(int64(b.MaxModelLen), b.DCP, int(b.interleave())), blk)
	r.RequestKVBytes = r.RequestSlots * b.SlotBytes
	r.RecommendedUtilization = min(math.Round((b.Utilization+float64(b.GraphBytes)/float64(b.DeviceBytes))*1e4)/1e4, 1)
	r.MinUtilization = b.MinUtilization(r.RequestKVBytes)
	r.MinDeviceBytes = b.MinDeviceBytes(r.RequestKVBytes)
	r.MaxModelLenFit = b.maxModelLenFit(r.KVTokensPerRank)
	r.HeadroomBytes = b.DeviceBytes - r.RequestedBytes - b.OutsideBytes
	return r
}

// MinUtilization is the smallest utilization, in steps of 0.0001, whose KV
// budget is at least kvBytes. It is above 1 when the device is too small.
func (b Budget) MinUtilization(kvBytes int64) float64 {
	need := b.NonKVBytes + b.GraphBytes + kvBytes
	u := math.Ceil(float64(need)/float64(b.DeviceBytes)*1e4) / 1e4
	// Guard the float rounding: step until the integer arithmetic agrees.
	for requested(b.DeviceBytes, u) < need {
		u = math.Round(u*1e4+1) / 1e4
	}
	for u > 1e-4 && requested(b.DeviceBytes, math.Round(u*1e4-1)/1e4) >= need {
		u = math.Round(u*1e4-1) / 1e4
	}
	return u
}

// MinDeviceBytes is the smallest device size (or memory limit) whose KV
// budget at b.Utilization is at least kvBytes.
func (b Budget) MinDeviceBytes(kvBytes int64) int64 {
	need := b.NonKVBytes + b.GraphBytes + kvBytes
	d := int64(math.Ceil(float64(need) / b.Utilization))
	for requested(d, b.Utilization) < need {
		d++
	}
	for d > 1 && requested(d-1, b.Utilization) >= need {
		d--
	}
	return d
}

// MaxUtilizationFor is the largest utilization, in steps of 0.0001, that
// leaves at least outsideNeed bytes free outside the utilization share once
// OutsideBytes are in use: ⌊(1 − (need + outside)/device) × 10⁴⌋ / 10⁴.
// It is ≤ 0 when no utilization leaves enough.
func (b Budget) MaxUtilizationFor(outsideNeed int64) float64 {
	need := outsideNeed + b.OutsideBytes
	u := math.Floor((1-float64(need)/float64(b.DeviceBytes))*1e4) / 1e4
	for u > 0 && b.DeviceBytes-requested(b.DeviceBytes, u) < need {
		u = math.Round(u*1e4-1) / 1e4
	}
	return u
}

// maxModelLenFit is the longest request whose most-loaded rank needs at most
// slots token slots (in whole blocks).
func (b Budget) maxModelLenFit(slots int64) int64 {
	blk := b.block()
	fits := func(s int64) bool {
		return roundUp(MaxLocalTokens(s, b.DCP, int(b.interleave())), blk) <= slots
	}
	n, _ := LargestFitting(1, slots*int64(b.DCP)+1, fits)
	return n
}

// Check refuses a budget that cannot hold one MaxModelLen request. The
// refusal names the values and the smallest utilization and the smallest
// memory limit that work, using the caller's flag names.
func (b Budget) Check(utilizationFlag, limitFlag string) error {
	if err := b.Validate(); err != nil {
		return err
	}
	r := b.Compute()
	if r.KVTokensPerRank >= r.RequestSlots {
		return nil
	}
	fix := fmt.Sprintf("set %s to at least %s (at %s %.4g)", limitFlag, FormatGiB(r.MinDeviceBytes), utilizationFlag, b.Utilization)
	if r.MinUtilization <= 1 {
		fix = fmt.Sprintf("set %s to at least %.4f, or %s", utilizationFlag, r.MinUtilization, fix)
	}
	if r.MaxModelLenFit > 0 {
		fix += fmt.Sprintf(", or lower the max model length to %d", r.MaxModelLenFit)
	}
	return fmt.Errorf("KV budget %s (%s × %.4g − non-KV %s − graphs %s) holds %d token slots per rank, but one %d-token request needs %d (%s); %s",
		FormatGiB(r.KVBudgetBytes), FormatGiB(b.DeviceBytes), b.Utilization, FormatGiB(b.NonKVBytes), FormatGiB(b.GraphBytes),
		r.KVTokensPerRank, b.MaxModelLen, r.RequestSlots, FormatGiB(r.RequestKVBytes), fix)
}
