package plan

// DefaultFlashInferWorkspaceBytes is the production engine's default
// FlashInfer workspace buffer: 394 MiB = 413,138,944 B.
const DefaultFlashInferWorkspaceBytes = 394 * MiB

// lseRowRound is the query-length granule of the trtllm-gen softmax-stats
// slab: a row's length is rounded up to 256.
const lseRowRound = 256

// LSESlabBytes is the softmax-stats slab the FlashInfer trtllm-gen sparse
// MLA launcher carves out of its workspace when the LSE is requested:
// 8 B (float2) × heads × batch × roundup(maxQLen, 256) + 1 MiB.
func LSESlabBytes(heads, batch, maxQLen int) int64 {
	return 8*int64(heads)*int64(batch)*roundUp(int64(max(maxQLen, 1)), lseRowRound) + MiB
}

// FlashInferSparseWorkspaceBytes is the workspace the FlashInfer sparse-MLA
// backend needs for one step of `tokens` scheduled tokens: the base buffer,
// plus under DCP (the only case that requests the LSE) the slab for the
// gathered heads (heads per TP rank × DCP), each token a one-row query on
// the forced-MQA path.
func FlashInferSparseWorkspaceBytes(base int64, headsPerRank, dcp, tokens int) int64 {
	if dcp <= 1 {
		return base
	}
	return base + LSESlabBytes(headsPerRank*dcp, tokens, 1)
}

// MaxTokensForWorkspace is the largest number of scheduled tokens whose
// FlashInfer sparse workspace under DCP (base + slab for gatheredHeads
// one-row queries) fits in `configured` bytes; 0 if not even one does.
func MaxTokensForWorkspace(configured, base int64, gatheredHeads int) int64 {
	room := configured - base - MiB
	if room < 0 || gatheredHeads <= 0 {
		return 0
	}
	return room / (8 * int64(gatheredHeads) * lseRowRound)
}

// DCPA2ATokens is the token capacity the production engine gives its
// direct DCP all-to-all buffer, sized for decode traffic:
// min(maxBatchedTokens, max(maxNumSeqs × (1 + k × spec), captureSize)),
// k = 2 under parallel drafting, else 1.
func DCPA2ATokens(maxBatchedTokens, maxNumSeqs, speculativeTokens int, parallelDrafting bool, captureSize int) int64 {
	perSeq := int64(SpecTokensPerSeq(speculativeTokens, parallelDrafting))
	return min(int64(maxBatchedTokens), max(int64(maxNumSeqs)*perSeq, int64(captureSize)))
}

// SpecTokensPerSeq is the query rows one decoding sequence brings to a step
// with k speculative tokens: 1 + k, or 1 + 2k under parallel drafting (the
// production engine's count, which its workspaces are sized by).
func SpecTokensPerSeq(k int, parallelDrafting bool) int {
	if parallelDrafting {
		return 1 + 2*k
	}
	return 1 + k
}

// DCPA2ABytes is the size of the direct DCP all-to-all buffer (send and
// receive halves) for `tokens` tokens: 2 × DCP × tokens × heads per TP rank
// × (kv_lora_rank × 2 B + 4 B of f32 LSE).
func DCPA2ABytes(dcp int, tokens int64, headsPerRank, kvLoraRank int) int64 {
	return 2 * int64(dcp) * tokens * int64(headsPerRank) * (int64(kvLoraRank)*2 + 4)
}

// DefaultCaptureSize is the production engine's default largest CUDA-graph
// capture size: min(2 × maxNumSeqs × (1 + spec), 512).
func DefaultCaptureSize(maxNumSeqs, speculativeTokens int) int {
	return min(2*maxNumSeqs*(1+speculativeTokens), 512)
}
