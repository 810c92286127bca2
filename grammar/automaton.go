package grammar

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// A grammar compiles to an automaton: every rule becomes a DFA over byte
// classes whose edges are bytes or calls of other rules (a pushdown
// automaton whose stack holds return states). All rules' states share one
// numbering.

// callEdge is a call of rule from a state, continuing at next after the
// callee finishes.
type callEdge struct {
	rule, next int32
}

type ruleInfo struct {
	name     string
	start    int32
	classMap [256]uint8 // byte → byte class of this rule
	nclass   int32
	nullable bool
}

type stateInfo struct {
	rule     int32
	final    bool
	hasBytes bool  // some byte leads on
	trans    int32 // offset of this state's row in automaton.trans
	callOff  int32 // calls are automaton.calls[callOff : callOff+callN]
	callN    int32
}

type automaton struct {
	rules  []ruleInfo
	states []stateInfo
	trans  []int32 // per state, one next state per byte class of its rule; -1 none
	calls  []callEdge
	root   int32 // rule the output must match
	// reachable lists the states a parse can stand in with bytes to
	// read (the tops of stacks), in ascending order.
	reachable []int32
}

// next is the state reached from s on byte b, or -1.
func (a *automaton) next(s int32, b byte) int32 {
	st := &a.states[s]
	if !st.hasBytes {
		return -1
	}
	r := &a.rules[st.rule]
	return a.trans[st.trans+int32(r.classMap[b])]
}

func (a *automaton) callsOf(s int32) []callEdge {
	st := &a.states[s]
	return a.calls[st.callOff : st.callOff+st.callN]
}

// ruleDef is one rule as a compiler defines it.
type ruleDef struct {
	name string
	body *expr
}

// builder collects rules and compiles them to an automaton.
type builder struct {
	lim   Limits
	rules []ruleDef
}

func newBuilder(lim Limits) *builder { return &builder{lim: lim} }

// rule declares a rule; define gives its body.
func (b *builder) rule(name string) (int32, error) {
	if len(b.rules) >= b.lim.MaxRules {
		return 0, limitError("MaxRules", "the grammar needs more than %d rules (the limit); simplify the constraint", b.lim.MaxRules)
	}
	b.rules = append(b.rules, ruleDef{name: name, body: nothingExpr})
	return int32(len(b.rules) - 1), nil
}

func (b *builder) define(r int32, body *expr) { b.rules[r].body = body }

// build compiles every rule, removes what cannot lead to a complete
// output, and checks the grammar can be parsed left to right: rule root
// must match something, and no rule may call itself before reading a byte
// (left recursion).
func (b *builder) build(root int32) (*automaton, error) {
	a := &automaton{root: root}
	for i, rd := range b.rules {
		if n := nfaSize(rd.body, b.lim.MaxRuleNFAStates); n > b.lim.MaxRuleNFAStates {
			return nil, limitError("MaxRuleNFAStates", "rule %s needs more than %d automaton states (the limit; counted repetitions such as {0,1000} or maxLength are expanded); lower the counts", rd.name, b.lim.MaxRuleNFAStates)
		}
		nf := newNFA()
		s, e := nf.frag(rd.body)
		if err := a.addRule(int32(i), rd.name, nf, s, e, b.lim); err != nil {
			return nil, err
		}
	}
	if err := a.finish(); err != nil {
		return nil, err
	}
	return a, nil
}

// nfa is a Thompson automaton of one rule: each state has epsilon edges
// and at most one byte-set or call edge.
type nfa struct {
	eps    [][]int32
	set    []byteSet
	hasSet []bool
	setTo  []int32
	call   []int32 // callee rule or -1
	callTo []int32
}

func newNFA() *nfa { return &nfa{} }

func (n *nfa) state() int32 {
	n.eps = append(n.eps, nil)
	n.set = append(n.set, byteSet{})
	n.hasSet = append(n.hasSet, false)
	n.setTo = append(n.setTo, -1)
	n.call = append(n.call, -1)
	n.callTo = append(n.callTo, -1)
	return int32(len(n.eps) - 1)
}

func (n *nfa) link(from, to int32) { n.eps[from] = append(n.eps[from], to) }

// frag adds e and returns its entry and exit states.
func (n *nfa) frag(e *expr) (int32, int32) {
	switch e.kind {
	case exNothing:
		return n.state(), n.state()
	case exEmpty:
		s := n.state()
		return s, s
	case exBytes:
		s, t := n.state(), n.state()
		n.set[s], n.hasSet[s], n.setTo[s] = e.set, true, t
		return s, t
	case exCall:
		s, t := n.state(), n.state()
		n.call[s], n.callTo[s] = e.rule, t
		return s, t
	case exSeq:
		s, t := n.frag(e.subs[0])
		for _, sub := range e.subs[1:] {
			s2, t2 := n.frag(sub)
			n.link(t, s2)
			t = t2
		}
		return s, t
	case exAlt:
		s, t := n.state(), n.state()
		for _, sub := range e.subs {
			s2, t2 := n.frag(sub)
			n.link(s, s2)
			n.link(t2, t)
		}
		return s, t
	case exGraph:
		g := e.graph
		nodes := make([]int32, g.nodes)
		for i := range nodes {
			nodes[i] = n.state()
		}
		t := n.state()
		for _, f := range g.finals {
			n.link(nodes[f], t)
		}
		for _, ed := range g.edges {
			s2, t2 := n.frag(ed.label)
			n.link(nodes[ed.from], s2)
			n.link(t2, nodes[ed.to])
		}
		return nodes[g.start], t
	case exRepeat:
		sub := e.subs[0]
		s := n.state()
		p := s
		for range e.min {
			s2, t2 := n.frag(sub)
			n.link(p, s2)
			p = t2
		}
		if e.max < 0 {
			loop := n.state()
			n.link(p, loop)
			s2, t2 := n.frag(sub)
			n.link(loop, s2)
			n.link(t2, loop)
			return s, loop
		}
		end := n.state()
		for range e.max - e.min {
			n.link(p, end)
			s2, t2 := n.frag(sub)
			n.link(p, s2)
			p = t2
		}
		n.link(p, end)
		return s, end
	}
	panic("grammar: unknown expression kind")
}

// closure adds the epsilon closure of set to itself (sorted, unique).
func (n *nfa) closure(set []int32, seen []uint32, gen uint32) []int32 {
	stack := append([]int32(nil), set...)
	for _, s := range set {
		seen[s] = gen
	}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, t := range n.eps[s] {
			if seen[t] != gen {
				seen[t] = gen
				set = append(set, t)
				stack = append(stack, t)
			}
		}
	}
	slices.Sort(set)
	return set
}

// byteClasses partitions the 256 byte values so that every byte set of n
// is a union of classes; it returns the class of each byte and the count.
func (n *nfa) byteClasses() ([256]uint8, int) {
	var class [256]int
	nclass := 1
	var sets []byteSet
	for i, has := range n.hasSet {
		if has && !slices.Contains(sets, n.set[i]) {
			sets = append(sets, n.set[i])
		}
	}
	for _, s := range sets {
		split := map[int]int{} // old class → class of its members in s
		for c := range 256 {
			if !s.has(byte(c)) {
				continue
			}
			old := class[c]
			nc, ok := split[old]
			if !ok {
				nc = nclass
				nclass++
				split[old] = nc
			}
			class[c] = nc
		}
		// Renumber densely.
		remap := map[int]int{}
		for c := range 256 {
			if _, ok := remap[class[c]]; !ok {
				remap[class[c]] = len(remap)
			}
			class[c] = remap[class[c]]
		}
		nclass = len(remap)
	}
	var out [256]uint8
	for c := range 256 {
		out[c] = uint8(class[c])
	}
	return out, nclass
}

// addRule determinizes one rule's NFA (subset construction), minimizes
// the DFA and appends its states, numbered in breadth-first order from the
// start so that equal rules get equal numbers.
func (a *automaton) addRule(id int32, name string, n *nfa, start, final int32, lim Limits) error {
	classMap, nclass := n.byteClasses()
	rep := make([]byte, nclass) // a byte of each class
	for c := 255; c >= 0; c-- {
		rep[classMap[c]] = byte(c)
	}
	seen := make([]uint32, len(n.eps))
	var gen uint32
	index := map[string]int32{}
	var sets [][]int32
	var buf []byte
	key := func(set []int32) string {
		buf = buf[:0]
		for _, s := range set {
			buf = binary.AppendUvarint(buf, uint64(s))
		}
		return string(buf)
	}
	intern := func(set []int32) (int32, error) {
		k := key(set)
		if id, ok := index[k]; ok {
			return id, nil
		}
		if len(a.states)+len(sets) >= lim.MaxStates {
			return 0, limitError("MaxStates", "the grammar needs more than %d automaton states (the limit; rule %s was being built); simplify the constraint", lim.MaxStates, name)
		}
		sid := int32(len(sets))
		index[k] = sid
		sets = append(sets, set)
		return sid, nil
	}
	gen++
	if _, err := intern(n.closure([]int32{start}, seen, gen)); err != nil {
		return err
	}
	var (
		finals []bool
		rows   [][]int32
		calls  [][]callEdge
	)
	// The classes each byte edge covers.
	classesOf := make([][]uint8, len(n.eps))
	for s, has := range n.hasSet {
		if has {
			for c := range nclass {
				if n.set[s].has(rep[c]) {
					classesOf[s] = append(classesOf[s], uint8(c))
				}
			}
		}
	}
	moves := make([][]int32, nclass)
	for i := 0; i < len(sets); i++ {
		set := sets[i]
		row := make([]int32, nclass)
		for c := range moves {
			moves[c] = moves[c][:0]
		}
		for _, s := range set {
			for _, c := range classesOf[s] {
				moves[c] = append(moves[c], n.setTo[s])
			}
		}
		for c := range nclass {
			move := moves[c]
			row[c] = -1
			if len(move) > 0 {
				gen++
				t, err := intern(n.closure(slices.Clone(move), seen, gen))
				if err != nil {
					return err
				}
				row[c] = t
			}
		}
		var callees []int32
		for _, s := range set {
			if n.call[s] >= 0 && !slices.Contains(callees, n.call[s]) {
				callees = append(callees, n.call[s])
			}
		}
		slices.Sort(callees)
		var cs []callEdge
		for _, c := range callees {
			var move []int32
			for _, s := range set {
				if n.call[s] == c {
					move = append(move, n.callTo[s])
				}
			}
			gen++
			t, err := intern(n.closure(move, seen, gen))
			if err != nil {
				return err
			}
			cs = append(cs, callEdge{rule: c, next: t})
		}
		finals = append(finals, slices.Contains(set, final))
		rows = append(rows, row)
		calls = append(calls, cs)
	}
	// Moore's refinement needs as many rounds as the longest distinguishing
	// string, which counted repetitions make long: large DFAs stay as built
	// (their equivalent states still share masks, see newGrammar).
	block := make([]int32, len(finals))
	if len(finals) <= maxMinimizeStates {
		block = minimize(finals, rows, calls)
	} else {
		for i := range block {
			block[i] = int32(i)
		}
	}
	// Number the blocks breadth first from the start's.
	order := []int32{block[0]}
	num := map[int32]int32{block[0]: 0}
	rep0 := map[int32]int32{} // block → a state in it
	for s := len(block) - 1; s >= 0; s-- {
		rep0[block[s]] = int32(s)
	}
	visit := func(b int32) {
		if _, ok := num[b]; !ok {
			num[b] = int32(len(order))
			order = append(order, b)
		}
	}
	for i := 0; i < len(order); i++ {
		s := rep0[order[i]]
		for _, t := range rows[s] {
			if t >= 0 {
				visit(block[t])
			}
		}
		for _, c := range calls[s] {
			visit(block[c.next])
		}
	}
	r := ruleInfo{name: name, start: int32(len(a.states)), classMap: classMap, nclass: int32(nclass)}
	for _, b := range order {
		s := rep0[b]
		st := stateInfo{rule: id, trans: -1, final: finals[s]}
		row := make([]int32, nclass)
		any := false
		for c, t := range rows[s] {
			row[c] = -1
			if t >= 0 {
				row[c] = r.start + num[block[t]]
				any = true
			}
		}
		if any {
			st.trans, st.hasBytes = int32(len(a.trans)), true
			a.trans = append(a.trans, row...)
		}
		st.callOff = int32(len(a.calls))
		for _, c := range calls[s] {
			a.calls = append(a.calls, callEdge{rule: c.rule, next: r.start + num[block[c.next]]})
		}
		st.callN = int32(len(a.calls)) - st.callOff
		a.states = append(a.states, st)
	}
	a.rules = append(a.rules, r)
	return nil
}

// maxMinimizeStates bounds the DFAs minimize runs on.
const maxMinimizeStates = 2048

// minimize returns the block of each DFA state under Moore's partition
// refinement: states are equivalent when they agree on being final and
// their byte and call edges lead to equivalent states.
func minimize(finals []bool, rows [][]int32, calls [][]callEdge) []int32 {
	n := len(finals)
	block := make([]int32, n)
	next := make([]int32, n)
	count := 0
	var buf []byte
	for {
		index := map[string]int32{}
		for s := range n {
			buf = buf[:0]
			if count > 0 {
				buf = binary.AppendVarint(buf, int64(block[s]))
			}
			if finals[s] {
				buf = append(buf, 1)
			} else {
				buf = append(buf, 0)
			}
			for _, t := range rows[s] {
				if t < 0 || count == 0 {
					buf = binary.AppendVarint(buf, int64(min(t, 0)))
				} else {
					buf = binary.AppendVarint(buf, int64(block[t])+1)
				}
			}
			for _, c := range calls[s] {
				buf = binary.AppendVarint(buf, int64(c.rule))
				if count > 0 {
					buf = binary.AppendVarint(buf, int64(block[c.next]))
				}
			}
			k := string(buf)
			b, ok := index[k]
			if !ok {
				b = int32(len(index))
				index[k] = b
			}
			next[s] = b
		}
		block, next = next, block
		if len(index) == count {
			return block
		}
		count = len(index)
	}
}

// finish removes states that cannot complete, computes nullable rules,
// refuses left recursion and lists the reachable states.
func (a *automaton) finish() error {
	// Live states can reach a final state through bytes and calls of
	// productive rules; a rule is productive when its start is live.
	live := make([]bool, len(a.states))
	for changed := true; changed; {
		changed = false
		for s := range a.states {
			if live[s] {
				continue
			}
			st := &a.states[s]
			ok := st.final
			if !ok && st.hasBytes {
				for _, t := range a.trans[st.trans : st.trans+a.rules[st.rule].nclass] {
					if t >= 0 && live[t] {
						ok = true
						break
					}
				}
			}
			if !ok {
				for _, c := range a.callsOf(int32(s)) {
					if live[a.rules[c.rule].start] && live[c.next] {
						ok = true
						break
					}
				}
			}
			if ok {
				live[s] = true
				changed = true
			}
		}
	}
	if !live[a.rules[a.root].start] {
		return &Error{wrapped: ErrUnsatisfiable, msg: "the constraint matches no output at all (it is unsatisfiable: a false schema, an empty enum or contradicting keywords); check it for contradictions"}
	}
	// Drop edges into dead states and calls of unproductive rules.
	for s := range a.states {
		st := &a.states[s]
		if st.hasBytes {
			row := a.trans[st.trans : st.trans+a.rules[st.rule].nclass]
			any := false
			for i, t := range row {
				if t >= 0 && !live[t] {
					row[i] = -1
				}
				any = any || row[i] >= 0
			}
			st.hasBytes = any
		}
		calls := a.calls[st.callOff : st.callOff+st.callN]
		kept := calls[:0]
		for _, c := range calls {
			if live[a.rules[c.rule].start] && live[c.next] {
				kept = append(kept, c)
			}
		}
		st.callN = int32(len(kept))
	}
	// Nullable rules reach a final state from their start through calls of
	// nullable rules alone.
	for changed := true; changed; {
		changed = false
		for r := range a.rules {
			if a.rules[r].nullable {
				continue
			}
			if a.reachesFinalWithoutBytes(a.rules[r].start) {
				a.rules[r].nullable = true
				changed = true
			}
		}
	}
	if err := a.checkLeftRecursion(); err != nil {
		return err
	}
	// Reachable states: from the root's start, through bytes, calls and
	// their returns.
	seen := make([]bool, len(a.states))
	stack := []int32{a.rules[a.root].start}
	seen[stack[0]] = true
	push := func(t int32) {
		if t >= 0 && live[t] && !seen[t] {
			seen[t] = true
			stack = append(stack, t)
		}
	}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		st := &a.states[s]
		if st.hasBytes {
			for _, t := range a.trans[st.trans : st.trans+a.rules[st.rule].nclass] {
				push(t)
			}
		}
		for _, c := range a.callsOf(s) {
			push(a.rules[c.rule].start)
			push(c.next)
		}
	}
	for s := range a.states {
		if seen[s] && a.states[s].hasBytes {
			a.reachable = append(a.reachable, int32(s))
		}
	}
	return nil
}

// reachesFinalWithoutBytes reports whether state s reaches a final state of
// its rule through calls of nullable rules only.
func (a *automaton) reachesFinalWithoutBytes(s int32) bool {
	seen := map[int32]bool{s: true}
	stack := []int32{s}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if a.states[x].final {
			return true
		}
		for _, c := range a.callsOf(x) {
			if a.rules[c.rule].nullable && !seen[c.next] {
				seen[c.next] = true
				stack = append(stack, c.next)
			}
		}
	}
	return false
}

// checkLeftRecursion refuses a rule that can call itself, directly or
// through other rules, before reading a byte: a left-to-right parser would
// push frames forever.
func (a *automaton) checkLeftRecursion() error {
	// left[r] are the rules r may call before reading a byte.
	left := make([][]int32, len(a.rules))
	for r := range a.rules {
		seen := map[int32]bool{a.rules[r].start: true}
		stack := []int32{a.rules[r].start}
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, c := range a.callsOf(x) {
				if !slices.Contains(left[r], c.rule) {
					left[r] = append(left[r], c.rule)
				}
				if a.rules[c.rule].nullable && !seen[c.next] {
					seen[c.next] = true
					stack = append(stack, c.next)
				}
			}
		}
	}
	// Depth-first search for a cycle.
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(a.rules))
	var path []int32
	var visit func(r int32) error
	visit = func(r int32) error {
		color[r] = grey
		path = append(path, r)
		for _, c := range left[r] {
			switch color[c] {
			case grey:
				i := slices.Index(path, c)
				names := make([]string, 0, len(path)-i+1)
				for _, p := range path[i:] {
					names = append(names, a.rules[p].name)
				}
				names = append(names, a.rules[c].name)
				return refuse("left recursion", "rule %s is left-recursive (%s calls itself before reading any text); rewrite it with repetition, e.g. list ::= item (\",\" item)*", a.rules[c].name, strings.Join(names, " → "))
			case white:
				if err := visit(c); err != nil {
					return err
				}
			}
		}
		path = path[:len(path)-1]
		color[r] = black
		return nil
	}
	for r := range a.rules {
		if color[r] == white {
			if err := visit(int32(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *automaton) String() string {
	var sb strings.Builder
	for r, ri := range a.rules {
		fmt.Fprintf(&sb, "rule %d %s start %d nullable %v\n", r, ri.name, ri.start, ri.nullable)
	}
	for s, st := range a.states {
		fmt.Fprintf(&sb, "  state %d rule %d final %v bytes %v calls %v\n", s, st.rule, st.final, st.hasBytes, a.callsOf(int32(s)))
	}
	return sb.String()
}
