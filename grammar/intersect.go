package grammar

// Intersections of regular languages, for JSON strings constrained by a
// pattern, a format and a length at once, and numbers with bounds: each
// side is compiled to a DFA and the product automaton is written back as a
// graph expression.

// regularDFA compiles a call-free expression to a DFA (rule 0 of a scratch
// automaton).
func regularDFA(e *expr, lim Limits) (*automaton, error) {
	if n := nfaSize(e, lim.MaxRuleNFAStates); n > lim.MaxRuleNFAStates {
		return nil, limitError("MaxRuleNFAStates", "a string or number constraint needs more than %d automaton states (the limit; counted repetitions such as maxLength are expanded); lower the counts", lim.MaxRuleNFAStates)
	}
	a := &automaton{}
	nf := newNFA()
	s, t := nf.frag(e)
	if err := a.addRule(0, "regular", nf, s, t, lim); err != nil {
		return nil, err
	}
	if len(a.calls) > 0 {
		panic("grammar: regularDFA of an expression with calls")
	}
	return a, nil
}

// intersect is the language of strings in a and in b, or, with andNot, in
// a and not in b. ok is false when it is empty.
func intersect(a, b *expr, andNot bool, lim Limits) (e *expr, ok bool, err error) {
	da, err := regularDFA(a, lim)
	if err != nil {
		return nil, false, err
	}
	db, err := regularDFA(b, lim)
	if err != nil {
		return nil, false, err
	}
	type pair struct{ a, b int32 }
	index := map[pair]int{}
	var pairs []pair
	add := func(p pair) (int, error) {
		if i, ok := index[p]; ok {
			return i, nil
		}
		if len(pairs) >= lim.MaxStates {
			return 0, limitError("MaxStates", "combining the string or number constraints needs more than %d automaton states (the limit); simplify them", lim.MaxStates)
		}
		index[p] = len(pairs)
		pairs = append(pairs, p)
		return len(pairs) - 1, nil
	}
	if _, err := add(pair{da.rules[0].start, db.rules[0].start}); err != nil {
		return nil, false, err
	}
	g := &graph{}
	targets := map[int]*byteSet{}
	var order []int
	for i := 0; i < len(pairs); i++ {
		p := pairs[i]
		fa := da.states[p.a].final
		fb := p.b >= 0 && db.states[p.b].final
		if (andNot && fa && !fb) || (!andNot && fa && fb) {
			g.finals = append(g.finals, i)
		}
		clear(targets)
		order = order[:0]
		for c := range 256 {
			na := da.next(p.a, byte(c))
			if na < 0 {
				continue
			}
			nb := int32(-1)
			if p.b >= 0 {
				nb = db.next(p.b, byte(c))
			}
			if nb < 0 && !andNot {
				continue
			}
			j, err := add(pair{na, nb})
			if err != nil {
				return nil, false, err
			}
			s, ok := targets[j]
			if !ok {
				s = &byteSet{}
				targets[j] = s
				order = append(order, j)
			}
			s.add(byte(c))
		}
		for _, j := range order {
			g.edges = append(g.edges, graphEdge{from: i, to: j, label: bytesExpr(*targets[j])})
		}
	}
	g.nodes = len(pairs)
	if len(g.finals) == 0 {
		return nothingExpr, false, nil
	}
	return graphExpr(g), true, nil
}

// intersectAll intersects a list of call-free expressions.
func intersectAll(parts []*expr, lim Limits) (*expr, bool, error) {
	if len(parts) == 0 {
		return emptyExpr, true, nil
	}
	e := parts[0]
	for _, p := range parts[1:] {
		var ok bool
		var err error
		if e, ok, err = intersect(e, p, false, lim); err != nil || !ok {
			return nothingExpr, false, err
		}
	}
	return e, true, nil
}

// matchesRegular reports whether the bytes s are in the language of the
// call-free DFA a (rule 0).
func matchesRegular(a *automaton, s []byte) bool {
	st := a.rules[0].start
	for _, c := range s {
		if st = a.next(st, c); st < 0 {
			return false
		}
	}
	return a.states[st].final
}
