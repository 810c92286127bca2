package mla

import (
	"math"

	"github.com/cpmla/cpmla/kernels"
)

// MHACausal is the non-absorbed (MHA) causal attention over one contiguous
// sequence: query i sits at position offset+i and sees keys [0, offset+i]
// (clipped to the s keys given).
//
//	qNope [t, h, dn]   qPe [t, h, dr]
//	kNope [s, h, dn]   kPe [s, dr]  (one RoPE key per token, shared by all heads)
//	v     [s, h, dv]
//	logit = scale · (qNope·kNope + qPe·kPe)
//	out   [t, h, dv]   lse [t, h] (natural log)
//
// keep, when not nil, reports whether key j is in query i's selected (top-k)
// set; keys it rejects are masked out. A query that sees no key gets out 0 and
// lse −Inf. It allocates one logit row of s values per call.
func MHACausal(out, lse, qNope, qPe, kNope, kPe, v []float32, t, s, h, dn, dr, dv, offset int, scale float32, keep func(i, j int) bool) {
	checkLen("MHACausal", "out", len(out), t*h*dv)
	checkLen("MHACausal", "lse", len(lse), t*h)
	checkLen("MHACausal", "qNope", len(qNope), t*h*dn)
	checkLen("MHACausal", "qPe", len(qPe), t*h*dr)
	checkLen("MHACausal", "kNope", len(kNope), s*h*dn)
	checkLen("MHACausal", "kPe", len(kPe), s*dr)
	checkLen("MHACausal", "v", len(v), s*h*dv)
	negInf := float32(math.Inf(-1))
	logits := make([]float32, s)
	for i := range t {
		end := min(offset+i+1, s) // keys [0, end)
		for hd := range h {
			o := out[(i*h+hd)*dv : (i*h+hd+1)*dv]
			clear(o)
			if end <= 0 {
				lse[i*h+hd] = negInf
				continue
			}
			qn := qNope[(i*h+hd)*dn : (i*h+hd+1)*dn]
			qp := qPe[(i*h+hd)*dr : (i*h+hd+1)*dr]
			lg := logits[:end]
			for j := range end {
				if keep != nil && !keep(i, j) {
					lg[j] = negInf
					continue
				}
				lg[j] = scale * (kernels.Dot(qn, kNope[(j*h+hd)*dn:(j*h+hd+1)*dn]) + kernels.Dot(qp, kPe[j*dr:(j+1)*dr]))
			}
			lse[i*h+hd] = kernels.LogSumExp(lg)
			kernels.Softmax(lg) // all −Inf gives all 0: out stays 0
			for j, p := range lg {
				if p != 0 {
					kernels.Axpy(p, v[(j*h+hd)*dv:(j*h+hd+1)*dv], o)
				}
			}
		}
	}
}
