package conformance

import (
	"encoding/binary"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/safetensors"
)

// loadCase reads a committed case into memory (tensor data copied, so that
// tests may mutate it).
func loadCase(t testing.TB, rel string) Case {
	t.Helper()
	ts, md := readAll(t, filepath.Join(caseDir, rel+".in.safetensors"))
	c := Case{Metadata: md, Tensors: map[string]safetensors.Tensor{}}
	for _, x := range ts {
		c.Tensors[x.Name] = x
	}
	return c
}

// clone deep-copies a case.
func (c Case) clone() Case {
	d := Case{Metadata: maps.Clone(c.Metadata), Tensors: map[string]safetensors.Tensor{}}
	for n, x := range c.Tensors {
		x.Shape = append([]int(nil), x.Shape...)
		x.Data = append([]byte(nil), x.Data...)
		d.Tensors[n] = x
	}
	return d
}

// setI32 overwrites element i of an I32 tensor.
func setI32(c Case, name string, i int, v int32) {
	binary.LittleEndian.PutUint32(c.Tensors[name].Data[4*i:], uint32(v))
}

// reshape replaces a tensor's shape and truncates or zero-extends its data
// to match, so that only the shape is wrong.
func reshape(c Case, name string, shape ...int) {
	x := c.Tensors[name]
	n := x.DType.Size()
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, n)
	copy(data, x.Data)
	x.Shape, x.Data = shape, data
	c.Tensors[name] = x
}

const (
	prefillCase  = "sparse_mla_prefill/h4_sq4_kv16_k8_corners"
	decodeCase   = "sparse_mla_decode/b2_sq2_h4_p64_topklen"
	indexerCase  = "indexer_topk/zero_scores_t6_s24_k12"
	combineCase  = "lse_combine/n1_t2_h2_d8"
	localizeCase = "dcp_localize_indices/anchor_compact"
	seqLensCase  = "dcp_local_seq_lens/anchor_n2_r1_i1"
	quantCase    = "fp8_ds_mla_quantize/edges"
	dequantCase  = "fp8_ds_mla_dequantize/all_codes"
)

const knownKernels = "dcp_local_seq_lens, dcp_localize_indices, fp8_ds_mla_dequantize, fp8_ds_mla_quantize, indexer_topk, lse_combine, sparse_mla_decode, sparse_mla_prefill"

func TestMalformedCases(t *testing.T) {
	tests := []struct {
		name   string
		base   string
		mutate func(c Case)
		want   string
	}{
		{"unknown kernel", prefillCase, func(c Case) { c.Metadata["kernel"] = "sparse_mla_prefil" },
			`unknown kernel "sparse_mla_prefil" in metadata (known: ` + knownKernels + `)`},
		{"no kernel", combineCase, func(c Case) { delete(c.Metadata, "kernel") },
			`metadata "kernel" is missing (set it to one of: ` + knownKernels + `)`},
		{"missing tensor", prefillCase, func(c Case) { delete(c.Tensors, "kv") },
			`sparse_mla_prefill: tensor "kv" is missing (want F32 [s_kv, 576]; case has "indices", "q", "topk_length")`},
		{"misspelt optional tensor", prefillCase, func(c Case) {
			c.Tensors["topk_lenght"] = c.Tensors["topk_length"]
			delete(c.Tensors, "topk_length")
		},
			`sparse_mla_prefill: tensor "topk_lenght" is not an input of this kernel (inputs: q, kv, indices, topk_length)`},
		{"wrong dtype", prefillCase, func(c Case) { x := c.Tensors["q"]; x.DType = safetensors.I32; c.Tensors["q"] = x },
			`sparse_mla_prefill: tensor "q" has dtype I32, want F32`},
		{"wrong head dim", prefillCase, func(c Case) { reshape(c, "q", 4, 4, 512) },
			`sparse_mla_prefill: tensor "q" has shape [4 4 512], want [s_q, h_q, 576]: dimension 2 must be 576, got 512`},
		{"wrong rank", prefillCase, func(c Case) { reshape(c, "kv", 16*576) },
			`sparse_mla_prefill: tensor "kv" has shape [9216] (rank 1), want [s_kv, 576] (rank 2)`},
		{"inconsistent rows", prefillCase, func(c Case) { reshape(c, "indices", 3, 8) },
			`sparse_mla_prefill: tensor "indices" has shape [3 8], want [s_q, topk]: s_q is 4 in tensor "q" but 3 here`},
		{"short data", prefillCase, func(c Case) { x := c.Tensors["kv"]; x.Data = x.Data[:100]; c.Tensors["kv"] = x },
			`sparse_mla_prefill: tensor "kv" holds 100 bytes, but F32 [16 576] needs 36864`},
		{"bad scale", prefillCase, func(c Case) { c.Metadata["sm_scale"] = "-0.5" },
			`sparse_mla_prefill: metadata "sm_scale" is "-0.5", want a finite positive float32 (e.g. "0.0625")`},
		{"missing scale", prefillCase, func(c Case) { delete(c.Metadata, "sm_scale") },
			`sparse_mla_prefill: metadata "sm_scale" is missing (set it to a positive number, e.g. "0.0625")`},
		{"d_v", prefillCase, func(c Case) { c.Metadata["d_v"] = "256" },
			`sparse_mla_prefill: metadata "d_v" is 256, but the sparse kernel returns the 512-wide latent (set "d_v" to "512"; W_UV maps it to the model's v_head_dim afterwards)`},
		{"topk_length too long", prefillCase, func(c Case) { setI32(c, "topk_length", 1, 9) },
			`sparse_mla_prefill: topk_length[1] is 9, want a value in [0, topk=8]`},
		{"page size vs cache", decodeCase, func(c Case) { c.Metadata["page_size"] = "61" },
			`sparse_mla_decode: tensor "kv_cache" has shape [5 64 656], want [num_blocks, page_size, 656]: page_size is 61 in metadata "page_size" but 64 here`},
		{"page size zero", decodeCase, func(c Case) { c.Metadata["page_size"] = "0" },
			`sparse_mla_decode: metadata "page_size" is "0", want an integer in [1, 1048576] (e.g. "64")`},
		{"cache dtype", decodeCase, func(c Case) { x := c.Tensors["kv_cache"]; x.DType = safetensors.F8E4M3; c.Tensors["kv_cache"] = x },
			`sparse_mla_decode: tensor "kv_cache" has dtype F8_E4M3, want U8`},
		{"slot out of range", decodeCase, func(c Case) { setI32(c, "indices", 3, 320) },
			`sparse_mla_decode: indices[0,0,3] is 320, want -1 or a slot of kv_cache in [0, 320) (num_blocks·page_size)`},
		{"negative slot", decodeCase, func(c Case) { setI32(c, "indices", 64+2, -7) },
			`sparse_mla_decode: indices[0,1,2] is -7, want -1 or a slot of kv_cache in [0, 320) (num_blocks·page_size)`},
		{"batch mismatch", decodeCase, func(c Case) { reshape(c, "topk_length", 3) },
			`sparse_mla_decode: tensor "topk_length" has shape [3], want [b]: b is 2 in tensor "q" but 3 here`},
		{"ends past keys", indexerCase, func(c Case) { setI32(c, "ends", 2, 25) },
			`indexer_topk: ends[2] is 25, want a key count in [0, s=24]`},
		{"negative topk", indexerCase, func(c Case) { c.Metadata["topk"] = "-1" },
			`indexer_topk: metadata "topk" is "-1", want an integer in [0, 16777216] (e.g. "2048")`},
		{"key width", indexerCase, func(c Case) { reshape(c, "k", 24, 8) },
			`indexer_topk: tensor "k" has shape [24 8], want [s, d]: d is 16 in tensor "q" but 8 here`},
		{"weights dtype", indexerCase, func(c Case) {
			x := c.Tensors["w"]
			x.DType = safetensors.BF16
			x.Shape = []int{6, 4}
			c.Tensors["w"] = x
		},
			`indexer_topk: tensor "w" has dtype BF16, want F32`},
		{"combine lse shape", combineCase, func(c Case) { reshape(c, "lse", 1, 2, 3) },
			`lse_combine: tensor "lse" has shape [1 2 3], want [n, t, h]: h is 2 in tensor "out" but 3 here`},
		{"combine no partials", combineCase, func(c Case) { reshape(c, "out", 0, 2, 2, 8); reshape(c, "lse", 0, 2, 2) },
			`lse_combine: out and lse hold 0 partials, want at least 1 (one per rank)`},
		{"rank past size", seqLensCase, func(c Case) { c.Metadata["dcp_rank"] = "2" },
			`dcp_local_seq_lens: metadata "dcp_rank" is 2, but dcp_size is 2 (ranks are 0..1)`},
		{"negative length", seqLensCase, func(c Case) { setI32(c, "seq_lens", 1, -9) },
			`dcp_local_seq_lens: seq_lens[1] is -9, want a length ≥ 0`},
		{"zero interleave", seqLensCase, func(c Case) { c.Metadata["interleave"] = "0" },
			`dcp_local_seq_lens: metadata "interleave" is "0", want an integer in [1, 1048576] (e.g. "1")`},
		{"missing dcp size", seqLensCase, func(c Case) { delete(c.Metadata, "dcp_size") },
			`dcp_local_seq_lens: metadata "dcp_size" is missing (set it to an integer in [1, 65536], e.g. "2")`},
		{"interleave vs block", localizeCase, func(c Case) { c.Metadata["interleave"] = "3" },
			`dcp_localize_indices: metadata block_size/interleave: cp_kv_cache_interleave_size 3 must be at most and divide the block size 64 (use --cp-kv-cache-interleave-size one of 1, 2, 4, 8, 16, 32 or 64, or a --block-size that is a multiple of 3)`},
		{"compact word", localizeCase, func(c Case) { c.Metadata["compact"] = "yes" },
			`dcp_localize_indices: metadata "compact" is "yes", want "true" or "false"`},
		{"request out of range", localizeCase, func(c Case) { setI32(c, "req_id", 0, 1) },
			`dcp_localize_indices: req_id[0] is 1, want a block_table row in [0, 1)`},
		{"block id overflow", localizeCase, func(c Case) { setI32(c, "block_table", 2, 1<<30) },
			`dcp_localize_indices: block_table[0,2] is 1073741824: its slots overflow int32 with block_size 64 (at most 33554431)`},
		{"records width", dequantCase, func(c Case) { reshape(c, "records", 2, 576) },
			`fp8_ds_mla_dequantize: tensor "records" has shape [2 576], want [n, 656]: dimension 1 must be 656, got 576`},
		{"quantize missing", quantCase, func(c Case) { delete(c.Tensors, "kv") },
			`fp8_ds_mla_quantize: tensor "kv" is missing (want F32 [n, 576]; case has no tensors)`},
	}
	bases := map[string]Case{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, ok := bases[tt.base]
			if !ok {
				base = loadCase(t, tt.base)
				bases[tt.base] = base
			}
			c := base.clone()
			tt.mutate(c)
			out, err := RunCase(c)
			if err == nil {
				t.Fatalf("RunCase succeeded with %d outputs, want error %q", len(out), tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans several lines: %q", err)
			}
		})
	}
}

// TestUncountedDecodeEntriesIgnored pins that decode indices past
// topk_length are never validated or read: garbage there changes nothing.
func TestUncountedDecodeEntriesIgnored(t *testing.T) {
	c := loadCase(t, decodeCase)
	want, err := RunCase(c.clone())
	if err != nil {
		t.Fatal(err)
	}
	g := c.clone()
	tl := toI32(g.Tensors["topk_length"])
	const topk = 64
	for r := range 4 { // b=2, s_q=2
		for j := int(tl[r/2]); j < topk; j++ {
			setI32(g, "indices", r*topk+j, 1<<30)
		}
	}
	got, err := RunCase(g)
	if err != nil {
		t.Fatalf("garbage past topk_length was refused: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("garbage past topk_length changed the outputs (-clean +garbage):\n%s", diff)
	}
}

// TestRunDoesNotModifyInputs pins that Run leaves the case's tensors as
// they were (they may be read-only file mappings): prefill rewrites invalid
// indices and decode ignores uncounted entries on copies only.
func TestRunDoesNotModifyInputs(t *testing.T) {
	for _, rel := range []string{prefillCase, decodeCase, indexerCase, combineCase, localizeCase} {
		c := loadCase(t, rel)
		before := c.clone()
		if _, err := RunCase(c); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if diff := cmp.Diff(before, c); diff != "" {
			t.Errorf("%s: inputs changed (-before +after):\n%s", rel, diff)
		}
	}
}
