package grammar

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// From constraint sets to grammar expressions over JSON text. Strings
// that a pattern, format or enum constrains are spelled canonically (",
// \ and control characters escaped, everything else as UTF-8;
// appendJSONString), so that their value and their spelling determine each
// other and the constraint can be enforced on the spelling; free strings,
// bounded by length or not, also take the other one-character escapes
// (\/, \u00XX for controls). Numbers are canonical decimals
// (no leading zeros) of at most 18 integer and 18 fraction digits (so
// that they fit int64 and float64) unless bounds need more. Properties
// come in the order the schema lists them; a property the schema does not
// name is generated only when additionalProperties (or
// unevaluatedProperties) allows it, or when the schema lists no
// properties at all (and NoAdditionalProperties is off). Array items past
// prefixItems are generated only when items allows them, or when there is
// no prefixItems.

// jsonSpecial are the characters a JSON string must escape.
var jsonSpecial = charset{{0, 0x1f}, {'"', '"'}, {'\\', '\\'}}

// jsonChar matches the spelling of one character of c inside a JSON
// string.
func jsonChar(c charset) *expr {
	alts := []*expr{utf8Expr(c.minus(jsonSpecial))}
	for _, r := range c.intersect(jsonSpecial) {
		for ch := r.lo; ch <= r.hi; ch++ {
			alts = append(alts, lit(string(appendJSONChar(nil, ch))))
		}
	}
	return alt(alts...)
}

// anyJSONChar is one character of any JSON string: any character but ",
// \ and controls as itself, or one of the escapes that stands for exactly
// one character (\" \\ \/ \b \f \n \r \t and \u00XX for controls; no
// surrogate halves, whose pairs would count as two characters).
var anyJSONChar = alt(utf8Expr(anyChar().minus(jsonSpecial)),
	seq(lit(`\`), alt(bytesExpr(setOf(`"\/bfnrt`)), seq(lit("u00"), bytesExpr(setOf("01")), bytesExpr(setOf("0123456789abcdefABCDEF"))))))

// formatPatterns are the string formats the compiler generates, each a
// regex (full match) whose strings every validator accepts: dates without
// February 29 and times without leap seconds, hostnames of up to four
// labels of up to 16 characters without "--", IPv6 in full form only,
// URIs with a hostname and up to four path segments of unreserved
// characters (bounded so that their automata stay small).
var formatPatterns = func() map[string]string {
	date := `[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))`
	tm := `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	dur := `(?:[0-9]{1,4}H(?:[0-9]{1,4}M)?(?:[0-9]{1,4}S)?|[0-9]{1,4}M(?:[0-9]{1,4}S)?|[0-9]{1,4}S)`
	label := `[A-Za-z0-9](?:-?[A-Za-z0-9]){0,15}`
	host := label + `(?:\.` + label + `){0,2}`
	octet := `(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])`
	uri := `[a-z][a-z0-9+.-]{0,7}://` + host + `(?:/[A-Za-z0-9._~-]{0,16}){0,4}(?:\?[A-Za-z0-9._~=&-]{0,32})?`
	pointer := `(?:/(?:[^/~]|~[01])*)*`
	return map[string]string{
		"date":                  date,
		"time":                  tm,
		"date-time":             date + "T" + tm,
		"duration":              `P(?:[0-9]{1,4}W|(?:[0-9]{1,4}Y(?:[0-9]{1,4}M)?(?:[0-9]{1,4}D)?|[0-9]{1,4}M(?:[0-9]{1,4}D)?|[0-9]{1,4}D)(?:T` + dur + `)?|T` + dur + `)`,
		"email":                 `[A-Za-z0-9_%+-]{1,16}(?:\.[A-Za-z0-9_%+-]{1,16}){0,2}@` + label + `(?:\.` + label + `){1,2}`,
		"hostname":              host,
		"ipv4":                  octet + `(?:\.` + octet + `){3}`,
		"ipv6":                  `(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}`,
		"uuid":                  `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
		"uri":                   uri,
		"uri-reference":         `(?:` + uri + `|(?:/[A-Za-z0-9._~-]{1,16}){1,4})`,
		"json-pointer":          pointer,
		"relative-json-pointer": `(?:0|[1-9][0-9]{0,8})(?:#|` + pointer + `)`,
	}
}()

func formatNames() string {
	var names []string
	for k := range formatPatterns {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// contentExpr is the spelling (without the quotes) of the strings a
// pattern (search semantics, as JSON Schema's) or a format (full match)
// allows.
func contentExpr(src string, search bool) (*expr, error) {
	n, err := parseRegex(src)
	if err != nil {
		return nil, err
	}
	return regexLanguage(src, n, jsonChar, anyJSONChar, search)
}

// ruleFor returns the rule of a conjunction of subschemas.
func (c *schemaCompiler) ruleFor(cj conj) (int32, error) {
	k := cj.key()
	if r, ok := c.rules[k]; ok {
		return r, nil
	}
	name := "schema"
	if len(cj) > 0 {
		name = "the schema at " + pathOrRoot(cj[0].path)
	}
	r, err := c.b.rule(name)
	if err != nil {
		return 0, err
	}
	c.rules[k] = r
	alts, err := c.collectConj(cj)
	if err != nil {
		return 0, err
	}
	var exprs []*expr
	for _, a := range alts {
		e, err := c.codegen(a)
		if err != nil {
			return 0, err
		}
		exprs = append(exprs, e)
	}
	c.b.define(r, alt(exprs...))
	return r, nil
}

// value is the expression of a value that satisfies cj (any JSON value
// when cj is empty).
func (c *schemaCompiler) value(cj conj) (*expr, error) {
	if len(cj) == 0 {
		r, err := c.anyValue()
		return call(r), err
	}
	r, err := c.ruleFor(cj)
	return call(r), err
}

// satisfiable reports whether some value satisfies cj.
func (c *schemaCompiler) satisfiable(cj conj) (bool, error) {
	alts, err := c.collectConj(cj)
	return len(alts) > 0, err
}

func (c *schemaCompiler) shared(r *int32, name string, body func() *expr) (int32, error) {
	if *r >= 0 {
		return *r, nil
	}
	id, err := c.b.rule(name)
	if err != nil {
		return 0, err
	}
	*r = id
	c.b.define(id, body())
	return id, nil
}

func (c *schemaCompiler) freeString() (int32, error) {
	return c.shared(&c.stringRule, "string", func() *expr { return seq(lit(`"`), star(anyJSONChar), lit(`"`)) })
}

func (c *schemaCompiler) freeNumber(integer bool) (int32, error) {
	if integer {
		return c.shared(&c.integerRule, "integer", func() *expr { return numberShape(18, 0, false) })
	}
	return c.shared(&c.numberRule, "number", func() *expr { return numberShape(18, 18, true) })
}

// anyValue is the rule of any JSON value.
func (c *schemaCompiler) anyValue() (int32, error) {
	if c.valueRule >= 0 {
		return c.valueRule, nil
	}
	value, err := c.b.rule("value")
	if err != nil {
		return 0, err
	}
	c.valueRule = value
	object, err := c.b.rule("object")
	if err != nil {
		return 0, err
	}
	array, err := c.b.rule("array")
	if err != nil {
		return 0, err
	}
	str, err := c.freeString()
	if err != nil {
		return 0, err
	}
	num, err := c.freeNumber(false)
	if err != nil {
		return 0, err
	}
	ws := c.ws
	sep := seq(ws, lit(","), ws)
	member := seq(call(str), ws, lit(":"), ws, call(value))
	c.b.define(value, alt(call(object), call(array), call(str), call(num), lit("true"), lit("false"), lit("null")))
	c.b.define(object, seq(lit("{"), ws, opt(seq(member, star(seq(sep, member)), ws)), lit("}")))
	c.b.define(array, seq(lit("["), ws, opt(seq(call(value), star(seq(sep, call(value))), ws)), lit("]")))
	return value, nil
}

// generatedTypes are the types an alternative generates: its types, and
// when "type" is absent only those whose keywords it uses (a subset of
// the values that validate).
func generatedTypes(cs *cset) uint8 {
	t := cs.types
	if !cs.typeGiven && cs.typeKeywords != 0 && t&cs.typeKeywords != 0 {
		t &= cs.typeKeywords
	}
	return t
}

// codegen is the expression of the values of one alternative.
func (c *schemaCompiler) codegen(cs *cset) (*expr, error) {
	if cs.never || cs.types == 0 {
		return nothingExpr, nil
	}
	if cs.hasEnum {
		var alts []*expr
		for _, v := range cs.enum {
			if c.valid(v, cs, false, 0) {
				alts = append(alts, lit(string(encodeJSON(nil, v))))
			}
		}
		return alt(alts...), nil
	}
	e, err := c.byTypes(cs, generatedTypes(cs))
	if err != nil {
		return nil, err
	}
	if e.kind == exNothing && generatedTypes(cs) != cs.types {
		return c.byTypes(cs, cs.types)
	}
	return e, nil
}

func (c *schemaCompiler) byTypes(cs *cset, types uint8) (*expr, error) {
	var alts []*expr
	if types&tNull != 0 {
		alts = append(alts, lit("null"))
	}
	if types&tBool != 0 {
		alts = append(alts, lit("true"), lit("false"))
	}
	if types&(tInteger|tFraction) != 0 {
		e, err := c.number(cs, types&tFraction == 0)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types&tString != 0 {
		e, err := c.str(cs)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types&tObject != 0 {
		e, err := c.object(cs)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types&tArray != 0 {
		e, err := c.array(cs)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return alt(alts...), nil
}

func (c *schemaCompiler) str(cs *cset) (*expr, error) {
	var parts []*expr
	if cs.minLen > 0 || cs.maxLen >= 0 {
		if cs.maxLen >= 0 && cs.maxLen < cs.minLen {
			return nothingExpr, nil
		}
		parts = append(parts, repeat(anyJSONChar, cs.minLen, cs.maxLen))
	}
	for _, p := range cs.patterns {
		e, err := contentExpr(p, true)
		if err != nil {
			return nil, wrapKeyword("pattern", pathOrRoot(cs.origins[0]), err)
		}
		parts = append(parts, e)
	}
	for _, f := range cs.formats {
		e, err := contentExpr(formatPatterns[f], false)
		if err != nil {
			return nil, err
		}
		parts = append(parts, e)
	}
	switch len(parts) {
	case 0:
		r, err := c.freeString()
		return call(r), err
	case 1:
		return seq(lit(`"`), parts[0], lit(`"`)), nil
	}
	e, ok, err := intersectAll(parts, c.lim)
	if err != nil || !ok {
		return nothingExpr, err
	}
	return seq(lit(`"`), e, lit(`"`)), nil
}

func (c *schemaCompiler) number(cs *cset, integer bool) (*expr, error) {
	if cs.lo == nil && cs.hi == nil {
		r, err := c.freeNumber(integer)
		return call(r), err
	}
	intDigits, fracDigits := 18, 18
	var parts []*expr
	for _, b := range []*numBound{cs.lo, cs.hi} {
		if b == nil {
			continue
		}
		neg, d, ok := decimalOf(b.v)
		if !ok {
			return nil, refuse("minimum", "the bound %s has more than %d digits; round it", b.src, maxBoundDigits)
		}
		intDigits = max(intDigits, len(d.intPart))
		fracDigits = max(fracDigits, len(d.frac)+1)
		if b == cs.lo {
			parts = append(parts, geExpr(neg, d, b.incl))
		} else {
			parts = append(parts, leExpr(neg, d, b.incl))
		}
	}
	if integer {
		fracDigits = 0
	}
	parts = append([]*expr{numberShape(intDigits, fracDigits, false)}, parts...)
	e, ok, err := intersectAll(parts, c.lim)
	if err != nil || !ok {
		return nothingExpr, err
	}
	return e, nil
}

func (c *schemaCompiler) object(cs *cset) (*expr, error) {
	var members []member
	for _, p := range cs.props {
		ok, err := c.satisfiable(p.c)
		if err != nil {
			return nil, err
		}
		req := slices.Contains(cs.required, p.name)
		if !ok {
			if req {
				return nothingExpr, nil
			}
			continue
		}
		members = append(members, member{p.name, p.c, req})
	}
	for _, r := range cs.required {
		if _, ok := cs.prop(r); ok {
			continue
		}
		var cj conj
		if cs.addlSet {
			if ok, err := c.satisfiable(cs.addl); err != nil || !ok {
				return nothingExpr, err
			}
			cj = cs.addl
		}
		members = append(members, member{r, cj, true})
	}
	extra := false
	if cs.addlSet {
		ok, err := c.satisfiable(cs.addl)
		if err != nil {
			return nil, err
		}
		extra = ok
	} else {
		extra = len(cs.props) == 0 && !c.spec.NoAdditionalProperties
	}
	nreq := 0
	for _, m := range members {
		if m.required {
			nreq++
		}
	}
	if cs.minProps > nreq {
		return nil, refuse("minProperties", "minProperties %d at %s asks for more properties than the %d it requires; list them in required", cs.minProps, pathOrRoot(cs.origins[0]), nreq)
	}
	if cs.maxProps >= 0 && (extra || len(members) > cs.maxProps) {
		if nreq > cs.maxProps {
			return nothingExpr, nil
		}
		return nil, refuse("maxProperties", "maxProperties %d at %s cannot be enforced when more properties are possible (%d listed, additional ones %v); drop optional properties or set additionalProperties to false", cs.maxProps, pathOrRoot(cs.origins[0]), len(members), extra)
	}
	ws := c.ws
	sep := seq(ws, lit(","), ws)
	n := len(members)
	g := &graph{nodes: 2*(n+1) + 0, start: 0}
	ne := func(i int) int { return i }
	em := func(i int) int { return n + 1 + i }
	for i, m := range members {
		v, err := c.value(m.c)
		if err != nil {
			return nil, err
		}
		p := seq(lit(string(appendJSONString(nil, m.name))), ws, lit(":"), ws, v)
		g.edges = append(g.edges, graphEdge{ne(i), em(i + 1), p}, graphEdge{em(i), em(i + 1), seq(sep, p)})
		if !m.required {
			g.edges = append(g.edges, graphEdge{ne(i), ne(i + 1), emptyExpr}, graphEdge{em(i), em(i + 1), emptyExpr})
		}
	}
	g.finals = []int{ne(n), em(n)}
	if extra {
		key, err := c.otherKey(members)
		if err != nil {
			return nil, err
		}
		v, err := c.value(cs.addl)
		if err != nil {
			return nil, err
		}
		p := seq(key, ws, lit(":"), ws, v)
		g.edges = append(g.edges, graphEdge{ne(n), em(n), p}, graphEdge{em(n), em(n), seq(sep, p)})
	}
	return seq(lit("{"), ws, graphExpr(g), ws, lit("}")), nil
}

// member is a property an object may have.
type member struct {
	name     string
	c        conj
	required bool
}

// otherKey is a property name other than those of members: one whose
// first character differs from the first character of each of them (a
// subset of the names the schema allows; excluding the listed names
// exactly would make every prefix of each name a state with a mask as
// costly as a free string's).
func (c *schemaCompiler) otherKey(members []member) (*expr, error) {
	if len(members) == 0 {
		r, err := c.freeString()
		return call(r), err
	}
	var firsts charset
	for _, m := range members {
		if r, _ := utf8.DecodeRuneInString(m.name); m.name != "" {
			firsts = append(firsts, runeRange{r, r})
		}
	}
	first := anyChar().minus(firsts.normalize())
	r, err := c.b.rule("property name")
	if err != nil {
		return nil, err
	}
	c.b.define(r, seq(lit(`"`), jsonChar(first), star(anyJSONChar), lit(`"`)))
	return call(r), nil
}

func (c *schemaCompiler) array(cs *cset) (*expr, error) {
	p := len(cs.prefix)
	maxItems := cs.maxItems
	for i, pc := range cs.prefix {
		ok, err := c.satisfiable(pc)
		if err != nil {
			return nil, err
		}
		if !ok {
			maxItems = minBound(maxItems, i)
			p = i
			break
		}
	}
	rest := p == len(cs.prefix) && (cs.itemsSet || len(cs.prefix) == 0)
	if rest && cs.itemsSet {
		ok, err := c.satisfiable(cs.items)
		if err != nil {
			return nil, err
		}
		rest = ok
	}
	if !rest {
		maxItems = minBound(maxItems, p)
	}
	if maxItems >= 0 && cs.minItems > maxItems {
		return nothingExpr, nil
	}
	ws := c.ws
	sep := seq(ws, lit(","), ws)
	var restElem *expr
	if rest {
		var err error
		if restElem, err = c.value(cs.items); err != nil {
			return nil, err
		}
	}
	elems := make([]*expr, p)
	for i := range p {
		var err error
		if elems[i], err = c.value(cs.prefix[i]); err != nil {
			return nil, err
		}
	}
	var list func(i int) *expr
	list = func(i int) *expr {
		if maxItems >= 0 && i >= maxItems {
			return emptyExpr
		}
		if i < p {
			e := elems[i]
			if i > 0 {
				e = seq(sep, e)
			}
			e = seq(e, list(i+1))
			if i < cs.minItems {
				return e
			}
			return opt(e)
		}
		if !rest {
			return emptyExpr
		}
		lo := max(0, cs.minItems-i)
		hi := -1
		if maxItems >= 0 {
			hi = maxItems - i
		}
		if i > 0 {
			return repeat(seq(sep, restElem), lo, hi)
		}
		more := -1
		if hi >= 0 {
			more = hi - 1
		}
		e := seq(restElem, repeat(seq(sep, restElem), max(lo-1, 0), more))
		if lo == 0 {
			return opt(e)
		}
		return e
	}
	return seq(lit("["), ws, list(0), ws, lit("]")), nil
}

// valid reports whether the literal v satisfies cs (for enum and const
// values, and oneOf). With loose, patterns and formats count as matched
// and undecidable cases as valid (the safe answer for oneOf); otherwise
// they count as failed (the safe answer for enum values).
func (c *schemaCompiler) valid(v any, cs *cset, loose bool, depth int) bool {
	if depth > 32 {
		return loose
	}
	if cs.never {
		return false
	}
	var t uint8
	switch x := v.(type) {
	case nil:
		t = tNull
	case bool:
		t = tBool
	case string:
		t = tString
	case []any:
		t = tArray
	case *jsonObject:
		t = tObject
	case json.Number:
		r, ok := numberRat(x)
		if !ok {
			return loose
		}
		t = tFraction
		if r.IsInt() {
			t = tInteger
		}
	}
	if cs.types&t == 0 {
		return false
	}
	if cs.hasEnum && !slices.ContainsFunc(cs.enum, func(w any) bool { return jsonEqual(v, w) }) {
		return false
	}
	validConj := func(x any, cj conj) bool {
		alts, err := c.collectConj(cj)
		if err != nil {
			return loose
		}
		for _, a := range alts {
			if c.valid(x, a, loose, depth+1) {
				return true
			}
		}
		return false
	}
	switch x := v.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if n < cs.minLen || (cs.maxLen >= 0 && n > cs.maxLen) {
			return false
		}
		if loose {
			return true
		}
		spelled := appendJSONString(nil, x)
		spelled = spelled[1 : len(spelled)-1]
		for _, p := range cs.patterns {
			if !c.matches("p"+p, p, true, spelled) {
				return false
			}
		}
		for _, f := range cs.formats {
			if !c.matches("f"+f, formatPatterns[f], false, spelled) {
				return false
			}
		}
	case json.Number:
		r, _ := numberRat(x)
		if b := cs.lo; b != nil {
			if k := r.Cmp(b.v); k < 0 || (k == 0 && !b.incl) {
				return false
			}
		}
		if b := cs.hi; b != nil {
			if k := r.Cmp(b.v); k > 0 || (k == 0 && !b.incl) {
				return false
			}
		}
	case *jsonObject:
		for i, k := range x.keys {
			pc, listed := cs.prop(k)
			if !listed {
				if !cs.addlSet {
					continue
				}
				pc = cs.addl
			}
			if !validConj(x.vals[i], pc) {
				return false
			}
		}
		for _, r := range cs.required {
			if _, ok := x.get(r); !ok {
				return false
			}
		}
		if len(x.keys) < cs.minProps || (cs.maxProps >= 0 && len(x.keys) > cs.maxProps) {
			return false
		}
	case []any:
		if len(x) < cs.minItems || (cs.maxItems >= 0 && len(x) > cs.maxItems) {
			return false
		}
		for i, e := range x {
			if pc, ok := cs.itemAt(i); ok && !validConj(e, pc) {
				return false
			}
		}
	}
	return true
}

// matches runs the spelling s through the DFA of a pattern or format.
func (c *schemaCompiler) matches(key, src string, search bool, s []byte) bool {
	a, ok := c.regular[key]
	if !ok {
		e, err := contentExpr(src, search)
		if err == nil {
			a, err = regularDFA(e, c.lim)
		}
		if err != nil {
			a = nil
		}
		c.regular[key] = a
	}
	return a != nil && matchesRegular(a, s)
}
