package grammar

// byteSet is a set of byte values.
type byteSet [4]uint64

func (s *byteSet) add(b byte) { s[b>>6] |= 1 << (b & 63) }

func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

func (s *byteSet) empty() bool { return s[0]|s[1]|s[2]|s[3] == 0 }

func byteRange(lo, hi byte) byteSet {
	var s byteSet
	s.addRange(lo, hi)
	return s
}

// exprKind is the kind of a grammar expression node.
type exprKind uint8

const (
	exNothing exprKind = iota // matches no string
	exEmpty                   // matches the empty string
	exBytes                   // one byte of set
	exSeq                     // subs in order
	exAlt                     // one of subs
	exRepeat                  // subs[0] between min and max times (max < 0: unbounded)
	exCall                    // the rule named by rule
	exGraph                   // the automaton graph
)

// expr is the right-hand side of a rule: a regular expression over bytes
// whose atoms may also be calls of other rules. Compilers build exprs; the
// automaton builder turns each rule's expr into a DFA.
type expr struct {
	kind     exprKind
	set      byteSet
	subs     []*expr
	min, max int
	rule     int32
	graph    *graph
}

// graph is an explicit automaton whose edges are labelled by expressions:
// it expresses languages (ordered optional object members, intersections
// of automata) that an expression tree could only write with repeated
// subtrees.
type graph struct {
	nodes  int
	start  int
	finals []int
	edges  []graphEdge
}

type graphEdge struct {
	from, to int
	label    *expr
}

func graphExpr(g *graph) *expr { return &expr{kind: exGraph, graph: g} }

var (
	nothingExpr = &expr{kind: exNothing}
	emptyExpr   = &expr{kind: exEmpty}
)

func bytesExpr(s byteSet) *expr {
	if s.empty() {
		return nothingExpr
	}
	return &expr{kind: exBytes, set: s}
}

func byteExpr(b byte) *expr {
	var s byteSet
	s.add(b)
	return &expr{kind: exBytes, set: s}
}

// lit matches the bytes of s.
func lit(s string) *expr {
	if s == "" {
		return emptyExpr
	}
	if len(s) == 1 {
		return byteExpr(s[0])
	}
	subs := make([]*expr, len(s))
	for i := range len(s) {
		subs[i] = byteExpr(s[i])
	}
	return &expr{kind: exSeq, subs: subs}
}

// seq matches its parts one after the other.
func seq(parts ...*expr) *expr {
	out := make([]*expr, 0, len(parts))
	for _, p := range parts {
		switch p.kind {
		case exNothing:
			return nothingExpr
		case exEmpty:
			continue
		case exSeq:
			out = append(out, p.subs...)
		default:
			out = append(out, p)
		}
	}
	switch len(out) {
	case 0:
		return emptyExpr
	case 1:
		return out[0]
	}
	return &expr{kind: exSeq, subs: out}
}

// alt matches any one of its alternatives.
func alt(alts ...*expr) *expr {
	out := make([]*expr, 0, len(alts))
	var set byteSet
	nsets := 0
	for _, a := range alts {
		switch a.kind {
		case exNothing:
			continue
		case exAlt:
			out = append(out, a.subs...)
		case exBytes:
			// Single-byte alternatives merge into one set.
			for i := range set {
				set[i] |= a.set[i]
			}
			nsets++
		default:
			out = append(out, a)
		}
	}
	if nsets > 0 {
		out = append(out, &expr{kind: exBytes, set: set})
	}
	switch len(out) {
	case 0:
		return nothingExpr
	case 1:
		return out[0]
	}
	return &expr{kind: exAlt, subs: out}
}

// repeat matches e between min and max times; max < 0 means no upper bound.
func repeat(e *expr, min, max int) *expr {
	switch {
	case max >= 0 && max < min:
		return nothingExpr
	case max == 0:
		return emptyExpr
	case e.kind == exEmpty:
		return emptyExpr
	case e.kind == exNothing:
		if min == 0 {
			return emptyExpr
		}
		return nothingExpr
	case min == 1 && max == 1:
		return e
	}
	return &expr{kind: exRepeat, subs: []*expr{e}, min: min, max: max}
}

func opt(e *expr) *expr  { return repeat(e, 0, 1) }
func star(e *expr) *expr { return repeat(e, 0, -1) }
func plus(e *expr) *expr { return repeat(e, 1, -1) }

func call(rule int32) *expr { return &expr{kind: exCall, rule: rule} }

// nfaSize bounds the number of NFA states e compiles to, saturating at
// limit+1 so that nested repetitions cannot overflow.
func nfaSize(e *expr, limit int) int {
	sat := func(v int) int { return min(v, limit+1) }
	switch e.kind {
	case exNothing, exEmpty:
		return 1
	case exBytes, exCall:
		return 2
	case exSeq:
		n := 0
		for _, s := range e.subs {
			n = sat(n + nfaSize(s, limit))
		}
		return n
	case exAlt:
		n := 2
		for _, s := range e.subs {
			n = sat(n + nfaSize(s, limit))
		}
		return n
	case exGraph:
		n := e.graph.nodes + 1
		for _, ed := range e.graph.edges {
			n = sat(n + nfaSize(ed.label, limit))
		}
		return n
	case exRepeat:
		one := nfaSize(e.subs[0], limit)
		copies := e.max
		if copies < 0 {
			copies = max(e.min, 1)
		}
		if copies > 0 && one > (limit+1)/copies {
			return limit + 1
		}
		return sat(one*copies + 2)
	}
	return 1
}
