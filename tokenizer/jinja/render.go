package jinja

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Exception is the error raise_exception(message) produces; templates use
// it to refuse conversations they cannot express.
type Exception struct{ Message string }

func (e *Exception) Error() string { return "template raised: " + e.Message }

// Limits bound one render, so that a template from an untrusted checkpoint
// cannot take the host down. Exceeding one is an error that wraps
// ErrOutputLimit, ErrIterationLimit or ErrDepthLimit.
type Limits struct {
	// MaxOutputBytes bounds the rendered text and every string or list a
	// render builds on the way.
	MaxOutputBytes int
	// MaxIterations bounds loop iterations plus macro calls, summed over
	// the render (and the length of range()).
	MaxIterations int
	// MaxDepth bounds nested macro calls.
	MaxDepth int
}

// DefaultLimits are generous for real chat templates (which render a few
// kilobytes in a few hundred iterations) and small enough to be safe.
var DefaultLimits = Limits{MaxOutputBytes: 8 << 20, MaxIterations: 1 << 20, MaxDepth: 64}

// The limit errors; the returned errors wrap one of these and say the
// value reached.
var (
	ErrOutputLimit    = errors.New("template output limit exceeded")
	ErrIterationLimit = errors.New("template iteration limit exceeded")
	ErrDepthLimit     = errors.New("template recursion depth limit exceeded")
)

// Render renders the template with the given variables under
// DefaultLimits. Go ints, []string, []map[string]any, map[string]any and
// map[string]string are accepted besides the value types listed in
// values.go (Go maps have no order: their keys are sorted).
func (t *Template) Render(vars map[string]any) (string, error) {
	return t.RenderLimited(vars, DefaultLimits)
}

// RenderLimited renders under the given limits (a zero field means the
// default).
func (t *Template) RenderLimited(vars map[string]any, lim Limits) (string, error) {
	if lim.MaxOutputBytes <= 0 {
		lim.MaxOutputBytes = DefaultLimits.MaxOutputBytes
	}
	if lim.MaxIterations <= 0 {
		lim.MaxIterations = DefaultLimits.MaxIterations
	}
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultLimits.MaxDepth
	}
	r := &renderer{out: &strings.Builder{}, lim: lim}
	sc := &scope{vars: map[string]any{}}
	for k, v := range vars {
		sc.vars[k] = normalize(v)
	}
	if err := r.exec(t.body, sc); err != nil {
		return "", err
	}
	return r.out.String(), nil
}

type renderer struct {
	out        *strings.Builder
	written    int // bytes written to every output buffer (macros render into their own)
	iterations int
	depth      int
	lim        Limits
}

// write appends rendered text, within the output limit.
func (r *renderer) write(s string) error {
	r.written += len(s)
	if r.written > r.lim.MaxOutputBytes {
		return fmt.Errorf("%w: rendering wrote more than %d bytes", ErrOutputLimit, r.lim.MaxOutputBytes)
	}
	r.out.WriteString(s)
	return nil
}

// tick counts one loop iteration or macro call.
func (r *renderer) tick() error {
	r.iterations++
	if r.iterations > r.lim.MaxIterations {
		return fmt.Errorf("%w: more than %d loop iterations and macro calls", ErrIterationLimit, r.lim.MaxIterations)
	}
	return nil
}

// checkSize refuses strings and lists larger than the output limit.
func (r *renderer) checkSize(v any) error {
	switch x := v.(type) {
	case string:
		if len(x) > r.lim.MaxOutputBytes {
			return fmt.Errorf("%w: a string of %d bytes (limit %d)", ErrOutputLimit, len(x), r.lim.MaxOutputBytes)
		}
	case *List:
		if len(x.items) > r.lim.MaxIterations {
			return fmt.Errorf("%w: a list of %d items (limit %d)", ErrIterationLimit, len(x.items), r.lim.MaxIterations)
		}
		if 16*len(x.items) > r.lim.MaxOutputBytes {
			return fmt.Errorf("%w: a list of %d items", ErrOutputLimit, len(x.items))
		}
	}
	return nil
}

// scope is a variable scope; for-loop bodies get their own, so that set
// inside a loop does not leak out (the reason namespace exists).
type scope struct {
	vars   map[string]any
	parent *scope
}

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (r *renderer) exec(body []node, sc *scope) error {
	for _, n := range body {
		switch n := n.(type) {
		case textNode:
			if err := r.write(n.text); err != nil {
				return err
			}
		case outputNode:
			v, err := r.eval(n.x, sc)
			if err != nil {
				return err
			}
			if err := r.write(toString(v)); err != nil {
				return err
			}
		case macroNode:
			sc.vars[n.name] = r.macro(n, sc)
		case ifNode:
			done := false
			for i, c := range n.conds {
				v, err := r.eval(c, sc)
				if err != nil {
					return err
				}
				if truthy(v) {
					if err := r.exec(n.bodies[i], sc); err != nil {
						return err
					}
					done = true
					break
				}
			}
			if !done {
				if err := r.exec(n.elseBody, sc); err != nil {
					return err
				}
			}
		case forNode:
			if err := r.execFor(n, sc); err != nil {
				return err
			}
		case setNode:
			v, err := r.eval(n.value, sc)
			if err != nil {
				return err
			}
			if n.attr == "" {
				sc.vars[n.target] = v
				continue
			}
			obj, _ := sc.lookup(n.target)
			ns, ok := obj.(*Namespace)
			if !ok {
				return fmt.Errorf("set %s.%s: %s is a %s, not a namespace", n.target, n.attr, n.target, typeName(obj))
			}
			ns.attrs[n.attr] = v
		}
	}
	return nil
}

func (r *renderer) execFor(n forNode, sc *scope) error {
	it, err := r.eval(n.iter, sc)
	if err != nil {
		return err
	}
	items, err := iterate(it)
	if err != nil {
		return fmt.Errorf("for %s in …: %w", strings.Join(n.targets, ", "), err)
	}
	inner := &scope{vars: map[string]any{}, parent: sc}
	if n.filter != nil {
		var kept []any
		for _, item := range items {
			if err := bindTargets(inner, n.targets, item); err != nil {
				return err
			}
			ok, err := r.eval(n.filter, inner)
			if err != nil {
				return err
			}
			if truthy(ok) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.exec(n.elseBody, sc)
	}
	for i, item := range items {
		if err := r.tick(); err != nil {
			return err
		}
		inner = &scope{vars: map[string]any{}, parent: sc}
		if err := bindTargets(inner, n.targets, item); err != nil {
			return err
		}
		loop := NewDict()
		loop.Set("index", int64(i+1))
		loop.Set("index0", int64(i))
		loop.Set("revindex", int64(len(items)-i))
		loop.Set("revindex0", int64(len(items)-i-1))
		loop.Set("first", i == 0)
		loop.Set("last", i == len(items)-1)
		loop.Set("length", int64(len(items)))
		loop.Set("previtem", undefined{"loop.previtem"})
		loop.Set("nextitem", undefined{"loop.nextitem"})
		if i > 0 {
			loop.Set("previtem", items[i-1])
		}
		if i+1 < len(items) {
			loop.Set("nextitem", items[i+1])
		}
		inner.vars["loop"] = loop
		if err := r.exec(n.body, inner); err != nil {
			return err
		}
	}
	return nil
}

func bindTargets(sc *scope, targets []string, item any) error {
	if len(targets) == 1 {
		sc.vars[targets[0]] = item
		return nil
	}
	var parts []any
	l, ok := item.(*List)
	if ok {
		parts = l.items
	}
	if !ok || len(parts) != len(targets) {
		return fmt.Errorf("cannot unpack a %s into %d loop variables", typeName(item), len(targets))
	}
	for i, t := range targets {
		sc.vars[t] = parts[i]
	}
	return nil
}

// iterate lists the elements of a list, the characters of a string, or the
// sorted keys of a dict. Undefined and none iterate as empty.
func iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case *List:
		return slices.Clone(x.items), nil // a loop sees the list as it was when it began
	case undefined, nil:
		return nil, nil
	case string:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case *Dict:
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = k
		}
		return out, nil
	}
	return nil, fmt.Errorf("a %s is not iterable", typeName(v))
}

func (r *renderer) eval(e expr, sc *scope) (any, error) {
	v, err := r.evalExpr(e, sc)
	if err != nil {
		return nil, err
	}
	if err := r.checkSize(v); err != nil {
		return nil, err
	}
	return v, nil
}

// macro makes the callable a {% macro %} defines: it renders the body in a
// scope of its own (whose parent is the scope it was defined in) and
// returns the text.
func (r *renderer) macro(n macroNode, def *scope) callable {
	return func(args []any, kwargs map[string]any) (any, error) {
		if len(args) > len(n.params) {
			return nil, fmt.Errorf("macro %s takes %d arguments, got %d", n.name, len(n.params), len(args))
		}
		if err := r.tick(); err != nil {
			return nil, err
		}
		r.depth++
		defer func() { r.depth-- }()
		if r.depth > r.lim.MaxDepth {
			return nil, fmt.Errorf("%w: macro %s called %d deep", ErrDepthLimit, n.name, r.depth)
		}
		sc := &scope{vars: make(map[string]any, len(n.params)), parent: def}
		for k := range kwargs {
			if !slices.Contains(n.params, k) {
				return nil, fmt.Errorf("macro %s has no argument %q", n.name, k)
			}
		}
		for i, p := range n.params {
			switch v, kw := kwargs[p]; {
			case i < len(args):
				if kw {
					return nil, fmt.Errorf("macro %s got argument %q twice", n.name, p)
				}
				sc.vars[p] = args[i]
			case kw:
				sc.vars[p] = v
			case n.defaults[i] != nil:
				d, err := r.eval(n.defaults[i], sc)
				if err != nil {
					return nil, err
				}
				sc.vars[p] = d
			default:
				sc.vars[p] = undefined{p}
			}
		}
		saved := r.out
		r.out = &strings.Builder{}
		err := r.exec(n.body, sc)
		text := r.out.String()
		r.out = saved
		if err != nil {
			return nil, fmt.Errorf("macro %s: %w", n.name, err)
		}
		return text, nil
	}
}

func (r *renderer) evalExpr(e expr, sc *scope) (any, error) {
	switch e := e.(type) {
	case literal:
		return e.v, nil
	case nameRef:
		if v, ok := sc.lookup(e.name); ok {
			return v, nil
		}
		if f, ok := globals[e.name]; ok {
			return f, nil
		}
		return undefined(e), nil
	case getAttr:
		x, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		return attribute(x, e.name)
	case getItem:
		x, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		k, err := r.eval(e.key, sc)
		if err != nil {
			return nil, err
		}
		return item(x, k)
	case getSlice:
		return r.evalSlice(e, sc)
	case callExpr:
		fn, err := r.eval(e.fn, sc)
		if err != nil {
			return nil, err
		}
		f, ok := fn.(callable)
		if !ok {
			return nil, fmt.Errorf("cannot call a %s", typeName(fn))
		}
		args, kwargs, err := r.evalArgs(e.args, e.kwargs, sc)
		if err != nil {
			return nil, err
		}
		return f(args, kwargs)
	case filterExpr:
		x, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		args, kwargs, err := r.evalArgs(e.args, e.kwargs, sc)
		if err != nil {
			return nil, err
		}
		v, err := filters[e.name](x, args, kwargs)
		if err != nil {
			return nil, fmt.Errorf("filter %s: %w", e.name, err)
		}
		return v, nil
	case testExpr:
		x, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		args, _, err := r.evalArgs(e.args, nil, sc)
		if err != nil {
			return nil, err
		}
		ok, err := tests[e.name](x, args)
		if err != nil {
			return nil, fmt.Errorf("test %s: %w", e.name, err)
		}
		return ok != e.negate, nil
	case unaryExpr:
		x, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(x), nil
		case "-":
			switch n := x.(type) {
			case int64:
				return -n, nil
			case float64:
				return -n, nil
			}
			return nil, fmt.Errorf("cannot negate a %s", typeName(x))
		default:
			switch x.(type) {
			case int64, float64:
				return x, nil
			}
			return nil, fmt.Errorf("unary + on a %s", typeName(x))
		}
	case binaryExpr:
		return r.evalBinary(e, sc)
	case condExpr:
		c, err := r.eval(e.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(e.then, sc)
		}
		return r.eval(e.els, sc)
	case listLit:
		out := make([]any, len(e.items))
		for i, it := range e.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return newList(out), nil
	case dictLit:
		out := NewDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i], sc)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("dict keys must be strings, got a %s", typeName(k))
			}
			v, err := r.eval(e.values[i], sc)
			if err != nil {
				return nil, err
			}
			out.Set(ks, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("internal: unknown expression %T", e)
}

func (r *renderer) evalArgs(argExprs []expr, kwExprs []kwArg, sc *scope) ([]any, map[string]any, error) {
	args := make([]any, len(argExprs))
	for i, a := range argExprs {
		v, err := r.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		args[i] = v
	}
	var kwargs map[string]any
	if len(kwExprs) > 0 {
		kwargs = make(map[string]any, len(kwExprs))
		for _, kw := range kwExprs {
			v, err := r.eval(kw.value, sc)
			if err != nil {
				return nil, nil, err
			}
			kwargs[kw.name] = v
		}
	}
	return args, kwargs, nil
}

func (r *renderer) evalSlice(e getSlice, sc *scope) (any, error) {
	x, err := r.eval(e.x, sc)
	if err != nil {
		return nil, err
	}
	bound := func(b expr) (int64, bool, error) {
		if b == nil {
			return 0, false, nil
		}
		v, err := r.eval(b, sc)
		if err != nil {
			return 0, false, err
		}
		if v == nil {
			return 0, false, nil
		}
		n, ok := v.(int64)
		if !ok {
			return 0, false, fmt.Errorf("slice bounds must be integers, got a %s", typeName(v))
		}
		return n, true, nil
	}
	lo, hasLo, err := bound(e.lo)
	if err != nil {
		return nil, err
	}
	hi, hasHi, err := bound(e.hi)
	if err != nil {
		return nil, err
	}
	step, hasStep, err := bound(e.step)
	if err != nil {
		return nil, err
	}
	if !hasStep {
		step = 1
	}
	if step == 0 {
		return nil, errors.New("slice step cannot be zero")
	}
	var elems []any
	isString := false
	switch v := x.(type) {
	case *List:
		elems = v.items
	case string:
		isString = true
		for _, c := range v {
			elems = append(elems, string(c))
		}
	default:
		return nil, fmt.Errorf("cannot slice a %s", typeName(x))
	}
	n := int64(len(elems))
	norm := func(i int64, has bool, def int64) int64 {
		if !has {
			return def
		}
		if i < 0 {
			i += n
		}
		lowest, highest := int64(0), n
		if step < 0 {
			lowest, highest = -1, n-1
		}
		return max(lowest, min(i, highest))
	}
	var out []any
	if step > 0 {
		for i := norm(lo, hasLo, 0); i < norm(hi, hasHi, n); i += step {
			out = append(out, elems[i])
		}
	} else {
		for i := norm(lo, hasLo, n-1); i > norm(hi, hasHi, -1); i += step {
			out = append(out, elems[i])
		}
	}
	if isString {
		var b strings.Builder
		for _, c := range out {
			b.WriteString(c.(string))
		}
		return b.String(), nil
	}
	if out == nil {
		out = []any{}
	}
	return newList(out), nil
}

func (r *renderer) evalBinary(e binaryExpr, sc *scope) (any, error) {
	l, err := r.eval(e.l, sc)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return r.eval(e.r, sc)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return r.eval(e.r, sc)
	}
	rv, err := r.eval(e.r, sc)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "==":
		return equal(l, rv), nil
	case "!=":
		return !equal(l, rv), nil
	case "~":
		return toString(l) + toString(rv), nil
	case "in", "not in":
		found, err := contains(rv, l)
		if err != nil {
			return nil, err
		}
		return found == (e.op == "in"), nil
	case "+":
		if ls, ok := l.(string); ok {
			if rs, ok := rv.(string); ok {
				return ls + rs, nil
			}
		}
		if ll, ok := l.(*List); ok {
			if rl, ok := rv.(*List); ok {
				if n := len(ll.items) + len(rl.items); n > r.lim.MaxIterations {
					return nil, fmt.Errorf("%w: a list of %d items (limit %d)", ErrIterationLimit, n, r.lim.MaxIterations)
				}
				return newList(append(slices.Clone(ll.items), rl.items...)), nil
			}
		}
	case "<", ">", "<=", ">=":
		c, err := compare(l, rv)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "<":
			return c < 0, nil
		case ">":
			return c > 0, nil
		case "<=":
			return c <= 0, nil
		default:
			return c >= 0, nil
		}
	case "*":
		if s, ok := l.(string); ok {
			if n, ok := rv.(int64); ok {
				if n > 0 && int64(len(s))*n > int64(r.lim.MaxOutputBytes) {
					return nil, fmt.Errorf("%w: %d copies of a %d-byte string", ErrOutputLimit, n, len(s))
				}
				return strings.Repeat(s, int(max(0, n))), nil
			}
		}
	}
	return arith(e.op, l, rv)
}

func arith(op string, l, r any) (any, error) {
	li, lInt := l.(int64)
	ri, rInt := r.(int64)
	if lInt && rInt {
		switch op {
		case "+":
			return li + ri, nil
		case "-":
			return li - ri, nil
		case "*":
			return li * ri, nil
		case "//", "%":
			if ri == 0 {
				return nil, errors.New("integer division by zero")
			}
			q, m := li/ri, li%ri
			if m != 0 && (m < 0) != (ri < 0) {
				q--
				m += ri
			}
			if op == "//" {
				return q, nil
			}
			return m, nil
		case "**":
			if ri >= 0 {
				return int64(math.Pow(float64(li), float64(ri))), nil
			}
		}
	}
	lf, lok := toFloat(l)
	rf, rok := toFloat(r)
	if !lok || !rok {
		return nil, fmt.Errorf("unsupported operand types for %s: %s and %s", op, typeName(l), typeName(r))
	}
	switch op {
	case "+":
		return lf + rf, nil
	case "-":
		return lf - rf, nil
	case "*":
		return lf * rf, nil
	case "/":
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return lf / rf, nil
	case "//":
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return math.Floor(lf / rf), nil
	case "%":
		if rf == 0 {
			return nil, errors.New("modulo by zero")
		}
		m := math.Mod(lf, rf)
		if m != 0 && (m < 0) != (rf < 0) {
			m += rf
		}
		return m, nil
	case "**":
		return math.Pow(lf, rf), nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func compare(l, r any) (int, error) {
	if ls, ok := l.(string); ok {
		if rs, ok := r.(string); ok {
			return strings.Compare(ls, rs), nil
		}
	}
	lf, lok := toFloat(l)
	rf, rok := toFloat(r)
	if !lok || !rok {
		return 0, fmt.Errorf("cannot compare a %s with a %s", typeName(l), typeName(r))
	}
	switch {
	case lf < rf:
		return -1, nil
	case lf > rf:
		return 1, nil
	}
	return 0, nil
}

func contains(container, x any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := x.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires a string, got a %s", typeName(x))
		}
		return strings.Contains(c, s), nil
	case *List:
		for _, e := range c.items {
			if equal(e, x) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		s, ok := x.(string)
		if !ok {
			return false, nil
		}
		_, found := c.vals[s]
		return found, nil
	case undefined, nil:
		return false, fmt.Errorf("'in' on a %s", typeName(container))
	}
	return false, fmt.Errorf("'in' on a %s", typeName(container))
}

// attribute implements x.name: dict keys, namespace attributes, loop
// fields, and the string and dict methods.
func attribute(x any, name string) (any, error) {
	switch v := x.(type) {
	case *Dict:
		if val, ok := v.vals[name]; ok {
			return val, nil
		}
		if m, ok := dictMethod(v, name); ok {
			return m, nil
		}
		return undefined{name}, nil
	case *Namespace:
		if val, ok := v.attrs[name]; ok {
			return val, nil
		}
		return undefined{name}, nil
	case string:
		if m, ok := stringMethod(v, name); ok {
			return m, nil
		}
		return undefined{name}, nil
	case *List:
		if m, ok := listMethod(v, name); ok {
			return m, nil
		}
		return undefined{name}, nil
	case undefined:
		return nil, fmt.Errorf("%q is undefined, so it has no attribute %q", v.name, name)
	case nil:
		return nil, fmt.Errorf("none has no attribute %q", name)
	}
	return undefined{name}, nil
}

// item implements x[key].
func item(x, key any) (any, error) {
	switch v := x.(type) {
	case *Dict:
		if k, ok := key.(string); ok {
			if val, ok := v.vals[k]; ok {
				return val, nil
			}
			return undefined{k}, nil
		}
		return undefined{toString(key)}, nil
	case *Namespace:
		if k, ok := key.(string); ok {
			return attribute(v, k)
		}
	case *List:
		i, ok := key.(int64)
		if !ok {
			return nil, fmt.Errorf("list indices must be integers, got a %s", typeName(key))
		}
		if i < 0 {
			i += int64(len(v.items))
		}
		if i < 0 || i >= int64(len(v.items)) {
			return undefined{"list index"}, nil
		}
		return v.items[i], nil
	case string:
		i, ok := key.(int64)
		if !ok {
			return nil, fmt.Errorf("string indices must be integers, got a %s", typeName(key))
		}
		runes := []rune(v)
		if i < 0 {
			i += int64(len(runes))
		}
		if i < 0 || i >= int64(len(runes)) {
			return undefined{"string index"}, nil
		}
		return string(runes[i]), nil
	case undefined:
		return nil, fmt.Errorf("%q is undefined, so it has no item %s", v.name, repr(key))
	case nil:
		return nil, fmt.Errorf("none has no item %s", repr(key))
	}
	return nil, fmt.Errorf("a %s has no items", typeName(x))
}

// listMethod returns the bound method name of l, if it is supported:
// append, extend and pop change the list, as in Python.
func listMethod(l *List, name string) (callable, bool) {
	switch name {
	case "append":
		return func(args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("append takes one argument, got %d", len(args))
			}
			l.items = append(l.items, args[0])
			return nil, nil
		}, true
	case "extend":
		return func(args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("extend takes one argument, got %d", len(args))
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, fmt.Errorf("extend: %w", err)
			}
			l.items = append(l.items, items...)
			return nil, nil
		}, true
	case "pop":
		return func(args []any, _ map[string]any) (any, error) {
			i := int64(len(l.items) - 1)
			if len(args) > 1 {
				return nil, fmt.Errorf("pop takes at most one argument")
			}
			if len(args) == 1 {
				n, ok := args[0].(int64)
				if !ok {
					return nil, fmt.Errorf("pop index must be an integer")
				}
				if n < 0 {
					n += int64(len(l.items))
				}
				i = n
			}
			if i < 0 || i >= int64(len(l.items)) {
				return nil, fmt.Errorf("pop index out of range")
			}
			v := l.items[i]
			l.items = append(l.items[:i:i], l.items[i+1:]...)
			return v, nil
		}, true
	case "index", "count":
		return func(args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("%s takes one argument", name)
			}
			n := int64(0)
			for i, e := range l.items {
				if equal(e, args[0]) {
					if name == "index" {
						return int64(i), nil
					}
					n++
				}
			}
			if name == "index" {
				return nil, fmt.Errorf("index: %s is not in the list", repr(args[0]))
			}
			return n, nil
		}, true
	}
	return nil, false
}
