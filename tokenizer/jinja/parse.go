package jinja

import (
	"fmt"
	"strings"
)

// Template is a parsed template. It is immutable and safe for concurrent
// use by several goroutines.
type Template struct {
	body []node
}

// Parse parses a template. Everything the renderer needs is resolved here,
// so rendering does no parsing.
func Parse(src string) (*Template, error) {
	if len(src) > MaxTemplateBytes {
		return nil, fmt.Errorf("parse template: %d bytes is more than the %d a template may have", len(src), MaxTemplateBytes)
	}
	chunks, err := chunkSource(src)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	p := &blockParser{chunks: chunks}
	body, end, err := p.parseBody()
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	if end != "" {
		return nil, fmt.Errorf("parse template: unexpected {%% %s %%} at offset %d", end, p.endPos)
	}
	return &Template{body: body}, nil
}

// Statement nodes.
type node interface{}

type textNode struct{ text string }
type outputNode struct{ x expr }
type ifNode struct {
	conds    []expr
	bodies   [][]node
	elseBody []node
}
type forNode struct {
	targets  []string
	iter     expr
	filter   expr // optional "if" clause
	body     []node
	elseBody []node
}
type macroNode struct {
	name     string
	params   []string
	defaults []expr // per parameter; nil when it has none
	body     []node
}
type setNode struct {
	target string
	attr   string // set target.attr = … when non-empty
	value  expr
}

// blockParser walks the chunks and builds the statement tree.
type blockParser struct {
	chunks []chunk
	i      int
	// endPos and pendingTail describe the statement that ended the last
	// body: its offset and the parser positioned after its keyword.
	endPos      int
	pendingTail *exprParser
	depth       int
}

// parseBody parses nodes until a statement it does not own (endif, else, …)
// or the end of the template; it returns that statement's keyword and
// leaves its tokens in p.pending.
func (p *blockParser) parseBody() ([]node, string, error) {
	var body []node
	for p.i < len(p.chunks) {
		c := p.chunks[p.i]
		p.i++
		switch c.kind {
		case chunkText:
			body = append(body, textNode{c.body})
		case chunkOutput:
			toks, err := lexExpr(c.body, c.pos)
			if err != nil {
				return nil, "", err
			}
			ep := &exprParser{toks: toks}
			x, err := ep.parseExpr()
			if err != nil {
				return nil, "", err
			}
			if err := ep.expectEOF(); err != nil {
				return nil, "", err
			}
			body = append(body, outputNode{x})
		case chunkStatement:
			toks, err := lexExpr(c.body, c.pos)
			if err != nil {
				return nil, "", err
			}
			if toks[0].kind != tokName {
				return nil, "", fmt.Errorf("offset %d: statement tag without a keyword", c.pos)
			}
			ep := &exprParser{toks: toks, i: 1}
			switch kw := toks[0].text; kw {
			case "if":
				n, err := p.parseIf(ep)
				if err != nil {
					return nil, "", err
				}
				body = append(body, n)
			case "for":
				n, err := p.parseFor(ep)
				if err != nil {
					return nil, "", err
				}
				body = append(body, n)
			case "set":
				n, err := parseSet(ep)
				if err != nil {
					return nil, "", err
				}
				body = append(body, n)
			case "macro":
				n, err := p.parseMacro(ep)
				if err != nil {
					return nil, "", err
				}
				body = append(body, n)
			case "elif", "else", "endif", "endfor", "endmacro":
				p.pendingTail = ep
				p.endPos = c.pos
				return body, kw, nil
			default:
				return nil, "", fmt.Errorf("offset %d: unsupported statement {%% %s %%} (supported: if, elif, else, endif, for, endfor, set, macro, endmacro)", c.pos, kw)
			}
		}
	}
	return body, "", nil
}

func (p *blockParser) parseIf(ep *exprParser) (node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var n ifNode
	cond, err := ep.parseExpr()
	if err != nil {
		return nil, err
	}
	if err := ep.expectEOF(); err != nil {
		return nil, err
	}
	for {
		body, end, err := p.parseBody()
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		tail := p.pendingTail
		switch end {
		case "elif":
			if cond, err = tail.parseExpr(); err != nil {
				return nil, err
			}
			if err := tail.expectEOF(); err != nil {
				return nil, err
			}
			continue
		case "else":
			if err := tail.expectEOF(); err != nil {
				return nil, err
			}
			elseBody, end2, err := p.parseBody()
			if err != nil {
				return nil, err
			}
			if end2 != "endif" {
				return nil, fmt.Errorf("offset %d: {%% else %%} of an if must be followed by {%% endif %%}, found %q", p.endPos, end2)
			}
			n.elseBody = elseBody
			return n, p.pendingTail.expectEOF()
		case "endif":
			return n, tail.expectEOF()
		default:
			return nil, fmt.Errorf("if block is not closed by {%% endif %%} (found %q at offset %d)", end, p.endPos)
		}
	}
}

func (p *blockParser) parseFor(ep *exprParser) (node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var n forNode
	for {
		t := ep.next()
		if t.kind != tokName {
			return nil, fmt.Errorf("offset %d: for loop needs a variable name", t.pos)
		}
		n.targets = append(n.targets, t.text)
		if !ep.acceptOp(",") {
			break
		}
	}
	if t := ep.next(); t.kind != tokName || t.text != "in" {
		return nil, fmt.Errorf("offset %d: expected 'in' in for loop", t.pos)
	}
	iter, err := ep.parseOr() // the ternary would swallow the filter's "if"
	if err != nil {
		return nil, err
	}
	n.iter = iter
	if ep.acceptName("if") {
		if n.filter, err = ep.parseOr(); err != nil {
			return nil, err
		}
	}
	if ep.acceptName("recursive") {
		return nil, fmt.Errorf("offset %d: recursive for loops are not supported", ep.peek().pos)
	}
	if err := ep.expectEOF(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.pendingTail.expectEOF(); err != nil {
			return nil, err
		}
		if n.elseBody, end, err = p.parseBody(); err != nil {
			return nil, err
		}
	}
	if end != "endfor" {
		return nil, fmt.Errorf("for loop is not closed by {%% endfor %%} (found %q at offset %d)", end, p.endPos)
	}
	return n, p.pendingTail.expectEOF()
}

// parseMacro parses {% macro name(a, b=default) %}…{% endmacro %}.
func (p *blockParser) parseMacro(ep *exprParser) (node, error) {
	t := ep.next()
	if t.kind != tokName {
		return nil, fmt.Errorf("offset %d: macro needs a name", t.pos)
	}
	n := macroNode{name: t.text}
	if err := ep.expectOp("("); err != nil {
		return nil, err
	}
	for !ep.acceptOp(")") {
		if len(n.params) > 0 {
			if err := ep.expectOp(","); err != nil {
				return nil, err
			}
			if ep.acceptOp(")") {
				break
			}
		}
		a := ep.next()
		if a.kind != tokName {
			return nil, fmt.Errorf("offset %d: macro %s: expected an argument name", a.pos, n.name)
		}
		var def expr
		if ep.acceptOp("=") {
			var err error
			if def, err = ep.parseExpr(); err != nil {
				return nil, err
			}
		}
		n.params = append(n.params, a.text)
		n.defaults = append(n.defaults, def)
	}
	if err := ep.expectEOF(); err != nil {
		return nil, err
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	body, end, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	if end != "endmacro" {
		return nil, fmt.Errorf("macro %s is not closed by {%% endmacro %%} (found %q at offset %d)", n.name, end, p.endPos)
	}
	n.body = body
	return n, p.pendingTail.expectEOF()
}

// maxNesting bounds nested blocks and expressions, so that parsing a
// hostile template cannot exhaust the stack.
const maxNesting = 100

// MaxTemplateBytes bounds the size of a template Parse accepts.
const MaxTemplateBytes = 1 << 20

func (p *blockParser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return fmt.Errorf("blocks nested deeper than %d", maxNesting)
	}
	return nil
}

func (p *blockParser) leave() { p.depth-- }

func parseSet(ep *exprParser) (node, error) {
	t := ep.next()
	if t.kind != tokName {
		return nil, fmt.Errorf("offset %d: set needs a variable name", t.pos)
	}
	n := setNode{target: t.text}
	if ep.acceptOp(".") {
		a := ep.next()
		if a.kind != tokName {
			return nil, fmt.Errorf("offset %d: set %s. needs an attribute name", a.pos, n.target)
		}
		n.attr = a.text
	}
	if !ep.acceptOp("=") {
		return nil, fmt.Errorf("offset %d: block form of set ({%% set x %%}…{%% endset %%}) is not supported; use {%% set x = value %%}", ep.peek().pos)
	}
	v, err := ep.parseExpr()
	if err != nil {
		return nil, err
	}
	n.value = v
	return n, ep.expectEOF()
}

// Expression nodes.
type expr interface{}

type literal struct{ v any }
type nameRef struct{ name string }
type getAttr struct {
	x    expr
	name string
}
type getItem struct{ x, key expr }
type getSlice struct{ x, lo, hi, step expr } // nil bounds are open
type callExpr struct {
	fn     expr
	args   []expr
	kwargs []kwArg
}
type kwArg struct {
	name  string
	value expr
}
type filterExpr struct {
	x      expr
	name   string
	args   []expr
	kwargs []kwArg
}
type testExpr struct {
	x      expr
	name   string
	args   []expr
	negate bool
}
type unaryExpr struct {
	op string
	x  expr
}
type binaryExpr struct {
	op   string
	l, r expr
}
type condExpr struct{ then, cond, els expr }
type listLit struct{ items []expr }
type dictLit struct{ keys, values []expr }

// exprParser is a recursive-descent parser over one tag's tokens with the
// operator precedence of Jinja2 (lowest first): conditional expression, or,
// and, not, comparisons and in, + and -, ~, * / // %, **, unary minus and
// plus, then primaries with member access, calls, filters and tests.
type exprParser struct {
	toks  []token
	i     int
	depth int
}

func (ep *exprParser) peek() token { return ep.toks[ep.i] }
func (ep *exprParser) next() token {
	t := ep.toks[ep.i]
	if t.kind != tokEOF {
		ep.i++
	}
	return t
}
func (ep *exprParser) acceptOp(op string) bool {
	if t := ep.peek(); t.kind == tokOp && t.text == op {
		ep.i++
		return true
	}
	return false
}
func (ep *exprParser) acceptName(name string) bool {
	if t := ep.peek(); t.kind == tokName && t.text == name {
		ep.i++
		return true
	}
	return false
}
func (ep *exprParser) expectOp(op string) error {
	if !ep.acceptOp(op) {
		t := ep.peek()
		return fmt.Errorf("offset %d: expected %q, found %s", t.pos, op, describe(t))
	}
	return nil
}
func (ep *exprParser) expectEOF() error {
	if t := ep.peek(); t.kind != tokEOF {
		return fmt.Errorf("offset %d: unexpected %s", t.pos, describe(t))
	}
	return nil
}

func describe(t token) string {
	switch t.kind {
	case tokEOF:
		return "end of tag"
	case tokString:
		return fmt.Sprintf("string %q", t.text)
	case tokInt, tokFloat:
		return "number"
	}
	return fmt.Sprintf("%q", t.text)
}

func (ep *exprParser) parseExpr() (expr, error) {
	ep.depth++
	defer func() { ep.depth-- }()
	if ep.depth > maxNesting {
		return nil, fmt.Errorf("offset %d: expression nested deeper than %d", ep.peek().pos, maxNesting)
	}
	x, err := ep.parseOr()
	if err != nil {
		return nil, err
	}
	if ep.acceptName("if") {
		cond, err := ep.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr = literal{undefined{name: "else branch"}}
		if ep.acceptName("else") {
			if els, err = ep.parseExpr(); err != nil {
				return nil, err
			}
		}
		return condExpr{then: x, cond: cond, els: els}, nil
	}
	return x, nil
}

func (ep *exprParser) parseOr() (expr, error) {
	l, err := ep.parseAnd()
	if err != nil {
		return nil, err
	}
	for ep.acceptName("or") {
		r, err := ep.parseAnd()
		if err != nil {
			return nil, err
		}
		l = binaryExpr{"or", l, r}
	}
	return l, nil
}

func (ep *exprParser) parseAnd() (expr, error) {
	l, err := ep.parseNot()
	if err != nil {
		return nil, err
	}
	for ep.acceptName("and") {
		r, err := ep.parseNot()
		if err != nil {
			return nil, err
		}
		l = binaryExpr{"and", l, r}
	}
	return l, nil
}

func (ep *exprParser) parseNot() (expr, error) {
	if ep.acceptName("not") {
		ep.depth++
		defer func() { ep.depth-- }()
		if ep.depth > maxNesting {
			return nil, fmt.Errorf("offset %d: expression nested deeper than %d", ep.peek().pos, maxNesting)
		}
		x, err := ep.parseNot()
		if err != nil {
			return nil, err
		}
		return unaryExpr{"not", x}, nil
	}
	return ep.parseCompare()
}

func (ep *exprParser) parseCompare() (expr, error) {
	l, err := ep.parseAdd()
	if err != nil {
		return nil, err
	}
	for {
		t := ep.peek()
		var op string
		switch {
		case t.kind == tokOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" || t.text == ">="):
			op = t.text
			ep.i++
		case t.kind == tokName && t.text == "in":
			op = "in"
			ep.i++
		case t.kind == tokName && t.text == "not" && ep.toks[ep.i+1].kind == tokName && ep.toks[ep.i+1].text == "in":
			op = "not in"
			ep.i += 2
		default:
			return l, nil
		}
		r, err := ep.parseAdd()
		if err != nil {
			return nil, err
		}
		l = binaryExpr{op, l, r}
	}
}

func (ep *exprParser) parseAdd() (expr, error) {
	l, err := ep.parseConcat()
	if err != nil {
		return nil, err
	}
	for {
		t := ep.peek()
		if t.kind != tokOp || (t.text != "+" && t.text != "-") {
			return l, nil
		}
		ep.i++
		r, err := ep.parseConcat()
		if err != nil {
			return nil, err
		}
		l = binaryExpr{t.text, l, r}
	}
}

func (ep *exprParser) parseConcat() (expr, error) {
	l, err := ep.parseMul()
	if err != nil {
		return nil, err
	}
	for ep.acceptOp("~") {
		r, err := ep.parseMul()
		if err != nil {
			return nil, err
		}
		l = binaryExpr{"~", l, r}
	}
	return l, nil
}

func (ep *exprParser) parseMul() (expr, error) {
	l, err := ep.parsePow()
	if err != nil {
		return nil, err
	}
	for {
		t := ep.peek()
		if t.kind != tokOp || (t.text != "*" && t.text != "/" && t.text != "//" && t.text != "%") {
			return l, nil
		}
		ep.i++
		r, err := ep.parsePow()
		if err != nil {
			return nil, err
		}
		l = binaryExpr{t.text, l, r}
	}
}

func (ep *exprParser) parsePow() (expr, error) {
	l, err := ep.parseUnary()
	if err != nil {
		return nil, err
	}
	for ep.acceptOp("**") {
		r, err := ep.parseUnary()
		if err != nil {
			return nil, err
		}
		l = binaryExpr{"**", l, r}
	}
	return l, nil
}

func (ep *exprParser) parseUnary() (expr, error) {
	if t := ep.peek(); t.kind == tokOp && (t.text == "-" || t.text == "+") {
		ep.i++
		ep.depth++
		defer func() { ep.depth-- }()
		if ep.depth > maxNesting {
			return nil, fmt.Errorf("offset %d: expression nested deeper than %d", t.pos, maxNesting)
		}
		x, err := ep.parseUnary()
		if err != nil {
			return nil, err
		}
		return unaryExpr{t.text, x}, nil
	}
	x, err := ep.parsePrimary()
	if err != nil {
		return nil, err
	}
	return ep.parsePostfix(x)
}

func (ep *exprParser) parsePrimary() (expr, error) {
	t := ep.next()
	switch t.kind {
	case tokString:
		s := t.text
		// Adjacent string literals concatenate.
		for ep.peek().kind == tokString {
			s += ep.next().text
		}
		return literal{s}, nil
	case tokInt:
		return literal{t.ival}, nil
	case tokFloat:
		return literal{t.num}, nil
	case tokName:
		switch t.text {
		case "true", "True":
			return literal{true}, nil
		case "false", "False":
			return literal{false}, nil
		case "none", "None":
			return literal{nil}, nil
		}
		return nameRef{t.text}, nil
	case tokOp:
		switch t.text {
		case "(":
			x, err := ep.parseExpr()
			if err != nil {
				return nil, err
			}
			if ep.acceptOp(",") {
				return nil, fmt.Errorf("offset %d: tuples are not supported", t.pos)
			}
			return x, ep.expectOp(")")
		case "[":
			var l listLit
			for !ep.acceptOp("]") {
				if len(l.items) > 0 {
					if err := ep.expectOp(","); err != nil {
						return nil, err
					}
					if ep.acceptOp("]") {
						break
					}
				}
				x, err := ep.parseExpr()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			return l, nil
		case "{":
			var d dictLit
			for !ep.acceptOp("}") {
				if len(d.keys) > 0 {
					if err := ep.expectOp(","); err != nil {
						return nil, err
					}
					if ep.acceptOp("}") {
						break
					}
				}
				k, err := ep.parseExpr()
				if err != nil {
					return nil, err
				}
				if err := ep.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := ep.parseExpr()
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.values = append(d.values, v)
			}
			return d, nil
		}
	}
	return nil, fmt.Errorf("offset %d: unexpected %s in expression", t.pos, describe(t))
}

func (ep *exprParser) parsePostfix(x expr) (expr, error) {
	for {
		t := ep.peek()
		switch {
		case t.kind == tokOp && t.text == ".":
			ep.i++
			a := ep.next()
			if a.kind != tokName && a.kind != tokInt {
				return nil, fmt.Errorf("offset %d: expected attribute name after '.'", a.pos)
			}
			if a.kind == tokInt {
				x = getItem{x, literal{a.ival}}
			} else {
				x = getAttr{x, a.text}
			}
		case t.kind == tokOp && t.text == "[":
			ep.i++
			var err error
			if x, err = ep.parseSubscript(x); err != nil {
				return nil, err
			}
		case t.kind == tokOp && t.text == "(":
			ep.i++
			args, kwargs, err := ep.parseArgs()
			if err != nil {
				return nil, err
			}
			x = callExpr{x, args, kwargs}
		case t.kind == tokOp && t.text == "|":
			ep.i++
			f := ep.next()
			if f.kind != tokName {
				return nil, fmt.Errorf("offset %d: expected filter name after '|'", f.pos)
			}
			if _, ok := filters[f.text]; !ok {
				return nil, fmt.Errorf("offset %d: unsupported filter %q (supported: %s)", f.pos, f.text, strings.Join(sortedKeys(filters), ", "))
			}
			fe := filterExpr{x: x, name: f.text}
			if ep.acceptOp("(") {
				var err error
				if fe.args, fe.kwargs, err = ep.parseArgs(); err != nil {
					return nil, err
				}
			}
			x = fe
		case t.kind == tokName && t.text == "is":
			ep.i++
			te := testExpr{x: x}
			te.negate = ep.acceptName("not")
			n := ep.next()
			if n.kind != tokName {
				return nil, fmt.Errorf("offset %d: expected test name after 'is'", n.pos)
			}
			te.name = n.text
			if te.name == "none" || te.name == "None" {
				te.name = "none"
			}
			if _, ok := tests[te.name]; !ok {
				return nil, fmt.Errorf("offset %d: unsupported test %q (supported: %s)", n.pos, n.text, strings.Join(sortedKeys(tests), ", "))
			}
			if ep.acceptOp("(") {
				args, _, err := ep.parseArgs()
				if err != nil {
					return nil, err
				}
				te.args = args
			} else if nt := ep.peek(); nt.kind == tokString || nt.kind == tokInt || nt.kind == tokFloat {
				arg, err := ep.parsePrimary()
				if err != nil {
					return nil, err
				}
				te.args = []expr{arg}
			}
			x = te
		default:
			return x, nil
		}
	}
}

func (ep *exprParser) parseSubscript(x expr) (expr, error) {
	var parts [3]expr
	n := 0
	isSlice := false
	for {
		if t := ep.peek(); !(t.kind == tokOp && (t.text == ":" || t.text == "]")) {
			e, err := ep.parseExpr()
			if err != nil {
				return nil, err
			}
			parts[n] = e
		}
		if ep.acceptOp("]") {
			break
		}
		if err := ep.expectOp(":"); err != nil {
			return nil, err
		}
		isSlice = true
		n++
		if n > 2 {
			return nil, fmt.Errorf("offset %d: too many ':' in slice", ep.peek().pos)
		}
	}
	if !isSlice {
		if parts[0] == nil {
			return nil, fmt.Errorf("offset %d: empty subscript", ep.peek().pos)
		}
		return getItem{x, parts[0]}, nil
	}
	return getSlice{x, parts[0], parts[1], parts[2]}, nil
}

func (ep *exprParser) parseArgs() ([]expr, []kwArg, error) {
	var args []expr
	var kwargs []kwArg
	for !ep.acceptOp(")") {
		if len(args)+len(kwargs) > 0 {
			if err := ep.expectOp(","); err != nil {
				return nil, nil, err
			}
			if ep.acceptOp(")") {
				break
			}
		}
		if t := ep.peek(); t.kind == tokName && ep.toks[ep.i+1].kind == tokOp && ep.toks[ep.i+1].text == "=" {
			ep.i += 2
			v, err := ep.parseExpr()
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwArg{t.text, v})
			continue
		}
		if len(kwargs) > 0 {
			return nil, nil, fmt.Errorf("offset %d: positional argument after keyword argument", ep.peek().pos)
		}
		v, err := ep.parseExpr()
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	return args, kwargs, nil
}
