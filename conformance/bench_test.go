package conformance

import (
	"testing"
)

// work is the arithmetic or memory traffic of one run of a case, from its
// inputs: flops for the attention and indexer kernels (2 per multiply-add),
// bytes read plus written for the others.
func work(t testing.TB, c Case) (amount float64, unit string) {
	t.Helper()
	dims := func(name string) []int { return c.Tensors[name].Shape }
	bytes := func(names ...string) float64 {
		var n float64
		for _, name := range names {
			n += float64(len(c.Tensors[name].Data))
		}
		return n
	}
	switch k := c.Metadata["kernel"]; k {
	case KernelSparsePrefill, KernelSparseDecode:
		idx := toI32(c.Tensors["indices"])
		q := dims("q")
		heads := q[len(q)-2]
		var skv int
		if k == KernelSparsePrefill {
			skv = dims("kv")[0]
		} else {
			s := dims("kv_cache")
			skv = s[0] * s[1]
		}
		var valid int
		for _, v := range idx {
			if v >= 0 && int(v) < skv {
				valid++
			}
		}
		// per valid (row, key, head): a 576-wide q·k and a 512-wide p·v
		return 2 * float64(valid) * float64(heads) * (576 + 512), "GFLOP/s"
	case KernelIndexerTopK:
		q := dims("q")
		var pairs int
		for _, e := range toI32(c.Tensors["ends"]) {
			pairs += int(e)
		}
		return 2 * float64(pairs) * float64(q[1]) * float64(q[2]), "GFLOP/s"
	case KernelDSMLAQuantize:
		return bytes("kv") + float64(dims("kv")[0]*656), "GB/s"
	case KernelDSMLADequantize:
		return bytes("records") + float64(dims("records")[0]*576*4), "GB/s"
	case KernelLSECombine:
		o := dims("out")
		return bytes("out", "lse") + float64(o[1]*o[2]*(o[3]+1)*4), "GB/s"
	case KernelDCPLocalSeqLens:
		return 2 * bytes("seq_lens"), "GB/s"
	case KernelDCPLocalize:
		return 2*bytes("indices") + bytes("req_id"), "GB/s"
	default:
		t.Fatalf("no work model for kernel %q", k)
		return 0, ""
	}
}

// BenchmarkRunCase measures Run (validation, copies and the engine's kernel)
// on one committed case per kernel. Run briefly: -benchtime=200ms.
func BenchmarkRunCase(b *testing.B) {
	for _, rel := range []string{
		"sparse_mla_prefill/h4_sq13_kv128_k128",
		"sparse_mla_prefill/h64_sq1_kv95_k128",
		"sparse_mla_decode/b2_sq1_h64_p2",
		"indexer_topk/prefill_t40_h4_k16_tie",
		"fp8_ds_mla_quantize/random64",
		"fp8_ds_mla_dequantize/roundtrip16",
		"lse_combine/n5_t3_h2_d512",
		"dcp_localize_indices/n3_r2_i4_b16_in_place",
	} {
		c := loadCase(b, rel)
		amount, unit := work(b, c)
		b.Run(rel, func(b *testing.B) {
			for b.Loop() {
				if _, err := RunCase(c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(amount*float64(b.N)/b.Elapsed().Seconds()/1e9, unit)
		})
	}
}
