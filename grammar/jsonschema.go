package grammar

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// JSON Schema (draft 2020-12, with draft-07's array items and definitions)
// to grammar. A schema document is indexed ($id, $anchor, JSON pointers),
// every subschema's keywords are collected into constraint sets (allOf and
// $ref merge, anyOf and oneOf distribute, so a subschema becomes a list of
// alternatives), and each alternative becomes grammar expressions over the
// JSON text. A keyword the grammar cannot enforce is refused with its
// location; annotations (title, description, default, examples, $comment,
// content*, readOnly, …) change nothing a grammar generates.

// snode is one subschema of the document.
type snode struct {
	id   int
	v    any // bool or *jsonObject
	base string
	path string // JSON pointer, for messages
}

type schemaDoc struct {
	nodes     []*snode
	byObj     map[*jsonObject]*snode
	resources map[string]*snode // absolute URI without fragment
	anchors   map[string]*snode // absolute URI with #anchor
	lim       Limits
}

const defaultBase = "https://schema.invalid/root.json"

// schemaKeywords are the keywords that hold subschemas, with their shape.
var schemaKeywords = map[string]byte{
	"properties": 'o', "patternProperties": 'o', "$defs": 'o', "definitions": 'o', "dependentSchemas": 'o',
	"additionalProperties": 's', "unevaluatedProperties": 's', "propertyNames": 's', "items": 'x',
	"additionalItems": 's', "unevaluatedItems": 's', "contains": 's', "not": 's', "if": 's', "then": 's',
	"else": 's', "contentSchema": 's', "prefixItems": 'a', "allOf": 'a', "anyOf": 'a', "oneOf": 'a',
	"dependencies": 'd',
}

func newSchemaDoc(root any, lim Limits) (*schemaDoc, error) {
	d := &schemaDoc{byObj: map[*jsonObject]*snode{}, resources: map[string]*snode{}, anchors: map[string]*snode{}, lim: lim}
	if _, err := d.index(root, defaultBase, "", 0); err != nil {
		return nil, err
	}
	if _, ok := d.resources[defaultBase]; !ok {
		d.resources[defaultBase] = d.nodes[0]
	}
	return d, nil
}

func (d *schemaDoc) newNode(v any, base, path string) *snode {
	n := &snode{id: len(d.nodes), v: v, base: base, path: path}
	d.nodes = append(d.nodes, n)
	if o, ok := v.(*jsonObject); ok {
		d.byObj[o] = n
	}
	return n
}

func pathOrRoot(p string) string {
	if p == "" {
		return "the root"
	}
	return p
}

// index registers v (a schema at path, with base URI base) and its
// subschemas.
func (d *schemaDoc) index(v any, base, path string, depth int) (*snode, error) {
	if depth > d.lim.MaxSchemaDepth {
		return nil, limitError("MaxSchemaDepth", "the schema nests more than %d levels (the limit)", d.lim.MaxSchemaDepth)
	}
	switch t := v.(type) {
	case bool:
		return d.newNode(t, base, path), nil
	case *jsonObject:
		anchorFrag, resource := "", ""
		if idv, ok := t.get("$id"); ok {
			id, ok := idv.(string)
			if !ok {
				return nil, refuse("$id", "$id at %s is not a string", pathOrRoot(path))
			}
			abs, err := resolveURI(base, id)
			if err != nil {
				return nil, refuse("$id", "$id %q at %s is not a URI reference: %v", id, pathOrRoot(path), err)
			}
			doc, frag, _ := strings.Cut(abs, "#")
			if frag != "" {
				anchorFrag = doc + "#" + frag // draft-07's spelling of an anchor
			} else {
				base, resource = doc, doc
			}
		}
		n := d.newNode(t, base, path)
		if anchorFrag != "" {
			d.anchors[anchorFrag] = n
		}
		if resource != "" {
			d.resources[resource] = n
		}
		for _, k := range []string{"$anchor", "$dynamicAnchor"} {
			if av, ok := t.get(k); ok {
				a, ok := av.(string)
				if !ok {
					return nil, refuse(k, "%s at %s is not a string", k, pathOrRoot(path))
				}
				d.anchors[base+"#"+a] = n
			}
		}
		for i, k := range t.keys {
			shape, ok := schemaKeywords[k]
			if !ok {
				continue
			}
			val := t.vals[i]
			sub := path + "/" + escapePointer(k)
			switch shape {
			case 's':
				if _, err := d.index(val, base, sub, depth+1); err != nil {
					return nil, err
				}
			case 'x', 'a':
				if arr, ok := val.([]any); ok {
					for j, e := range arr {
						if _, err := d.index(e, base, sub+"/"+strconv.Itoa(j), depth+1); err != nil {
							return nil, err
						}
					}
				} else if shape == 'x' {
					if _, err := d.index(val, base, sub, depth+1); err != nil {
						return nil, err
					}
				}
			case 'o', 'd':
				if o, ok := val.(*jsonObject); ok {
					for j, key := range o.keys {
						if _, isArr := o.vals[j].([]any); shape == 'd' && isArr {
							continue
						}
						if _, err := d.index(o.vals[j], base, sub+"/"+escapePointer(key), depth+1); err != nil {
							return nil, err
						}
					}
				}
			}
		}
		return n, nil
	}
	return nil, refuse("", "the schema at %s is %s, not an object or a boolean", pathOrRoot(path), jsonKind(v))
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func resolveURI(base, ref string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	r, err := url.Parse(ref)
	if err != nil {
		return "", err
	}
	return b.ResolveReference(r).String(), nil
}

// resolveRef finds the schema ref names from n.
func (d *schemaDoc) resolveRef(n *snode, ref string) (*snode, error) {
	abs, err := resolveURI(n.base, ref)
	if err != nil {
		return nil, refuse("$ref", "$ref %q at %s is not a URI reference: %v", ref, pathOrRoot(n.path), err)
	}
	doc, frag, _ := strings.Cut(abs, "#")
	res, ok := d.resources[doc]
	if !ok {
		return nil, refuse("$ref", "$ref %q at %s names %s, a schema outside this document; this server fetches no schemas: put it under $defs and refer to it as #/$defs/…", ref, pathOrRoot(n.path), doc)
	}
	if frag == "" {
		return res, nil
	}
	if !strings.HasPrefix(frag, "/") {
		if t := d.anchors[doc+"#"+frag]; t != nil {
			return t, nil
		}
		return nil, refuse("$ref", "$ref %q at %s names anchor %q, which the document does not define", ref, pathOrRoot(n.path), frag)
	}
	// A JSON pointer from the resource's root.
	cur := res.v
	path := res.path
	for _, tok := range strings.Split(frag[1:], "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil, refuse("$ref", "$ref %q at %s: bad percent-encoding", ref, pathOrRoot(n.path))
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case *jsonObject:
			v, ok := c.get(tok)
			if !ok {
				return nil, refuse("$ref", "$ref %q at %s points to %s/%s, which does not exist", ref, pathOrRoot(n.path), path, tok)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, refuse("$ref", "$ref %q at %s points past an array", ref, pathOrRoot(n.path))
			}
			cur = c[i]
		default:
			return nil, refuse("$ref", "$ref %q at %s points inside a non-container", ref, pathOrRoot(n.path))
		}
		path += "/" + escapePointer(tok)
	}
	switch c := cur.(type) {
	case *jsonObject:
		if t, ok := d.byObj[c]; ok {
			return t, nil
		}
		return d.index(c, res.base, path, 0)
	case bool:
		return d.newNode(c, res.base, path), nil
	}
	return nil, refuse("$ref", "$ref %q at %s points to %s, not a schema", ref, pathOrRoot(n.path), jsonKind(cur))
}

// Types, as a bit set.
const (
	tNull uint8 = 1 << iota
	tBool
	tObject
	tArray
	tString
	tInteger
	tFraction // numbers that are not integers
	allTypes  = tNull | tBool | tObject | tArray | tString | tInteger | tFraction
)

var typeBits = map[string]uint8{
	"null": tNull, "boolean": tBool, "object": tObject, "array": tArray, "string": tString,
	"integer": tInteger, "number": tInteger | tFraction,
}

// conj is a conjunction of subschemas (allOf of them), sorted by id.
type conj []*snode

func (c conj) key() string {
	var sb strings.Builder
	for _, n := range c {
		fmt.Fprintf(&sb, "%d,", n.id)
	}
	return sb.String()
}

func conjOf(parts ...conj) conj {
	var out conj
	for _, p := range parts {
		for _, n := range p {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.SortFunc(out, func(a, b *snode) int { return a.id - b.id })
	return out
}

type numBound struct {
	v    *big.Rat
	incl bool
	src  string
}

type propCons struct {
	name string
	c    conj
}

// cset is one alternative of a subschema: every constraint it puts on a
// value, keywords of all merged subschemas together.
type cset struct {
	never   bool
	types   uint8
	hasEnum bool
	enum    []any
	// typeKeywords: the types whose keywords appear (for inferring the
	// type when "type" is absent).
	typeKeywords uint8
	typeGiven    bool

	minLen, maxLen int // maxLen < 0: none
	patterns       []string
	formats        []string

	lo, hi *numBound

	props    []propCons
	required []string
	addl     conj
	addlSet  bool
	minProps int
	maxProps int // < 0: none

	prefix    []conj
	items     conj
	itemsSet  bool
	minItems  int
	maxItems  int // < 0: none
	origins   []string
	evalProps bool // unevaluatedProperties seen
}

func newCset() *cset {
	return &cset{types: allTypes, maxLen: -1, maxProps: -1, maxItems: -1}
}

// countKeyword is the bound a count keyword (minLength … maxItems) sets,
// and the type whose values it constrains.
func (c *cset) countKeyword(k string) (*int, uint8) {
	switch k {
	case "minLength":
		return &c.minLen, tString
	case "maxLength":
		return &c.maxLen, tString
	case "minProperties":
		return &c.minProps, tObject
	case "maxProperties":
		return &c.maxProps, tObject
	case "minItems":
		return &c.minItems, tArray
	case "maxItems":
		return &c.maxItems, tArray
	}
	panic("grammar: " + k + " is not a count keyword")
}

func (c *cset) clone() *cset {
	d := *c
	d.enum = slices.Clone(c.enum)
	d.patterns = slices.Clone(c.patterns)
	d.formats = slices.Clone(c.formats)
	d.props = slices.Clone(c.props)
	d.required = slices.Clone(c.required)
	d.prefix = slices.Clone(c.prefix)
	return &d
}

func (c *cset) prop(name string) (conj, bool) {
	for _, p := range c.props {
		if p.name == name {
			return p.c, true
		}
	}
	return nil, false
}

// itemAt is the conjunction position i (0-based) of an array must satisfy
// under c, and whether c constrains it at all.
func (c *cset) itemAt(i int) (conj, bool) {
	if i < len(c.prefix) {
		return c.prefix[i], true
	}
	return c.items, c.itemsSet
}

// merge is the conjunction of two alternatives.
func merge(a, b *cset) *cset {
	m := a.clone()
	m.never = a.never || b.never
	m.types &= b.types
	m.typeKeywords |= b.typeKeywords
	m.typeGiven = a.typeGiven || b.typeGiven
	switch {
	case a.hasEnum && b.hasEnum:
		m.enum = nil
		for _, v := range a.enum {
			if slices.ContainsFunc(b.enum, func(w any) bool { return jsonEqual(v, w) }) {
				m.enum = append(m.enum, v)
			}
		}
	case b.hasEnum:
		m.hasEnum, m.enum = true, slices.Clone(b.enum)
	}
	m.minLen = max(a.minLen, b.minLen)
	m.maxLen = minBound(a.maxLen, b.maxLen)
	m.patterns = append(m.patterns, b.patterns...)
	for _, f := range b.formats {
		if !slices.Contains(m.formats, f) {
			m.formats = append(m.formats, f)
		}
	}
	m.lo = tighterLo(a.lo, b.lo)
	m.hi = tighterHi(a.hi, b.hi)
	// Properties: a name one side lists but the other does not must also
	// satisfy the other side's additionalProperties.
	m.props = nil
	for _, p := range a.props {
		c := p.c
		if bc, ok := b.prop(p.name); ok {
			c = conjOf(c, bc)
		} else if b.addlSet {
			c = conjOf(c, b.addl)
		}
		m.props = append(m.props, propCons{p.name, c})
	}
	for _, p := range b.props {
		if _, ok := a.prop(p.name); ok {
			continue
		}
		c := p.c
		if a.addlSet {
			c = conjOf(c, a.addl)
		}
		m.props = append(m.props, propCons{p.name, c})
	}
	for _, r := range b.required {
		if !slices.Contains(m.required, r) {
			m.required = append(m.required, r)
		}
	}
	m.addl = conjOf(a.addl, b.addl)
	m.addlSet = a.addlSet || b.addlSet
	m.minProps = max(a.minProps, b.minProps)
	m.maxProps = minBound(a.maxProps, b.maxProps)
	// Items: position by position.
	n := max(len(a.prefix), len(b.prefix))
	m.prefix = nil
	for i := range n {
		ca, _ := a.itemAt(i)
		cb, _ := b.itemAt(i)
		m.prefix = append(m.prefix, conjOf(ca, cb))
	}
	m.items = conjOf(a.items, b.items)
	m.itemsSet = a.itemsSet || b.itemsSet
	m.minItems = max(a.minItems, b.minItems)
	m.maxItems = minBound(a.maxItems, b.maxItems)
	m.origins = append(m.origins, b.origins...)
	m.evalProps = a.evalProps || b.evalProps
	return m
}

func minBound(a, b int) int {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	}
	return min(a, b)
}

func tighterLo(a, b *numBound) *numBound {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	switch c := a.v.Cmp(b.v); {
	case c > 0:
		return a
	case c < 0:
		return b
	}
	if !a.incl {
		return a
	}
	return b
}

func tighterHi(a, b *numBound) *numBound {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	switch c := a.v.Cmp(b.v); {
	case c < 0:
		return a
	case c > 0:
		return b
	}
	if !a.incl {
		return a
	}
	return b
}

// Keywords that change nothing a grammar generates.
var annotationKeywords = map[string]bool{
	"$id": true, "$anchor": true, "$dynamicAnchor": true, "$comment": true, "$defs": true,
	"definitions": true, "title": true, "description": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "$vocabulary": true, "contentMediaType": true,
	"contentEncoding": true, "contentSchema": true,
}

// knownDialects are the $schema values whose keywords the compiler
// reads (as 2020-12, with draft-07's items array and definitions).
var knownDialects = map[string]bool{
	"https://json-schema.org/draft/2020-12/schema": true, "https://json-schema.org/draft/2019-09/schema": true,
	"http://json-schema.org/draft-07/schema": true, "http://json-schema.org/draft-06/schema": true,
}

// schemaCompiler turns a document into grammar rules.
type schemaCompiler struct {
	doc   *schemaDoc
	spec  Spec
	lim   Limits
	b     *builder
	alts  map[int][]*cset // collect results by node id
	busy  map[int]bool    // nodes being collected ($ref cycles)
	rules map[string]int32
	ws    *expr
	// shared rules, made on first use
	stringRule, numberRule, integerRule, valueRule int32
	regular                                        map[string]*automaton
	depth                                          int
}

func compileJSONSchema(src string, spec Spec, lim Limits) (*automaton, error) {
	v, err := parseJSON(src, lim.MaxSchemaDepth)
	if err != nil {
		if e, ok := err.(*Error); ok {
			return nil, e
		}
		return nil, syntaxError("the JSON schema is not valid JSON: %v", err)
	}
	doc, err := newSchemaDoc(v, lim)
	if err != nil {
		return nil, err
	}
	c := &schemaCompiler{doc: doc, spec: spec, lim: lim, b: newBuilder(lim), alts: map[int][]*cset{}, busy: map[int]bool{},
		rules: map[string]int32{}, stringRule: -1, numberRule: -1, integerRule: -1, valueRule: -1, regular: map[string]*automaton{}}
	switch {
	case spec.NoWhitespace:
		c.ws = emptyExpr
	case spec.WhitespacePattern != "":
		n, err := parseRegex(spec.WhitespacePattern)
		if err != nil {
			return nil, err
		}
		if c.ws, err = regexLanguage(spec.WhitespacePattern, n, utf8Expr, nil, false); err != nil {
			return nil, err
		}
	default:
		c.ws = star(bytesExpr(setOf(" \t\n\r")))
	}
	root, err := c.ruleFor(conj{doc.nodes[0]})
	if err != nil {
		return nil, err
	}
	return c.b.build(root)
}

// collect returns the alternatives of subschema n.
func (c *schemaCompiler) collect(n *snode) ([]*cset, error) {
	if a, ok := c.alts[n.id]; ok {
		return a, nil
	}
	if c.busy[n.id] {
		return nil, refuse("$ref", "the schema at %s refers to itself through $ref/allOf/anyOf without a value in between (a reference cycle); every cycle must pass through properties or items", pathOrRoot(n.path))
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > c.lim.MaxSchemaDepth {
		return nil, limitError("MaxSchemaDepth", "the schema nests $ref, allOf, anyOf and oneOf more than %d deep (the limit)", c.lim.MaxSchemaDepth)
	}
	c.busy[n.id] = true
	defer delete(c.busy, n.id)
	alts, err := c.collectNode(n)
	if err != nil {
		return nil, err
	}
	c.alts[n.id] = alts
	return alts, nil
}

// collectConj returns the alternatives of a conjunction of subschemas.
func (c *schemaCompiler) collectConj(cj conj) ([]*cset, error) {
	alts := []*cset{newCset()}
	for _, n := range cj {
		more, err := c.collect(n)
		if err != nil {
			return nil, err
		}
		if alts, err = c.product(alts, more, n); err != nil {
			return nil, err
		}
	}
	return alts, nil
}

func (c *schemaCompiler) product(a, b []*cset, at *snode) ([]*cset, error) {
	if len(a)*len(b) > c.lim.MaxAlternatives {
		return nil, limitError("MaxAlternatives", "the schema at %s expands to more than %d alternatives (allOf distributed over anyOf/oneOf; the limit); simplify it", pathOrRoot(at.path), c.lim.MaxAlternatives)
	}
	out := make([]*cset, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			m := merge(x, y)
			if !m.never && m.types != 0 {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

func (c *schemaCompiler) collectNode(n *snode) ([]*cset, error) {
	own := newCset()
	own.origins = []string{n.path}
	switch v := n.v.(type) {
	case bool:
		if !v {
			own.never = true
			return nil, nil
		}
		return []*cset{own}, nil
	}
	o := n.v.(*jsonObject)
	at := pathOrRoot(n.path)
	var allOf []*snode
	var anyOfs [][]*snode
	var oneOfs [][]*snode
	var uneval, unevalItems conj
	unevalSet, unevalItemsSet := false, false
	hasIf := false
	for _, k := range o.keys {
		if k == "if" {
			hasIf = true
		}
	}
	sub := func(k string, v any) (*snode, error) {
		return c.node(v, n, n.path+"/"+escapePointer(k))
	}
	subs := func(k string, v any) ([]*snode, error) {
		arr, ok := v.([]any)
		if !ok {
			return nil, refuse(k, "%s at %s must be an array of schemas", k, at)
		}
		var out []*snode
		for i, e := range arr {
			s, err := c.node(e, n, n.path+"/"+escapePointer(k)+"/"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	nonNegInt := func(k string, v any) (int, error) {
		num, ok := v.(json.Number)
		if !ok {
			return 0, refuse(k, "%s at %s must be a non-negative integer", k, at)
		}
		r, ok := numberRat(num)
		if !ok || !r.IsInt() || r.Sign() < 0 {
			return 0, refuse(k, "%s at %s must be a non-negative integer, got %s", k, at, num)
		}
		if !r.Num().IsInt64() || r.Num().Int64() > 1<<30 {
			return 1 << 30, nil
		}
		return int(r.Num().Int64()), nil
	}
	var itemsArray []*snode
	itemsIsArray := false
	var additionalItems *snode
	for i, k := range o.keys {
		v := o.vals[i]
		switch {
		case annotationKeywords[k]:
			continue
		case strings.HasPrefix(k, "x-"):
			continue
		}
		switch k {
		case "$schema":
			if u, ok := v.(string); !ok || !knownDialects[strings.TrimSuffix(u, "#")] {
				return nil, refuse(k, "$schema %v at %s names a dialect this server does not know; use https://json-schema.org/draft/2020-12/schema (or leave $schema out)", v, at)
			}
		case "$ref":
			ref, ok := v.(string)
			if !ok {
				return nil, refuse("$ref", "$ref at %s is not a string", at)
			}
			t, err := c.doc.resolveRef(n, ref)
			if err != nil {
				return nil, err
			}
			allOf = append(allOf, t)
		case "$dynamicRef", "$recursiveRef", "$recursiveAnchor":
			return nil, refuse(k, "%s at %s resolves through the dynamic scope, which this server does not implement; use $ref", k, at)
		case "type":
			var names []string
			switch t := v.(type) {
			case string:
				names = []string{t}
			case []any:
				for _, e := range t {
					s, ok := e.(string)
					if !ok {
						return nil, refuse("type", "type at %s lists %v, not a type name", at, e)
					}
					names = append(names, s)
				}
			default:
				return nil, refuse("type", "type at %s must be a type name or a list of them", at)
			}
			var bits uint8
			for _, s := range names {
				b, ok := typeBits[s]
				if !ok {
					return nil, refuse("type", "type %q at %s is not a JSON Schema type (null, boolean, object, array, number, string, integer)", s, at)
				}
				bits |= b
			}
			own.types &= bits
			own.typeGiven = true
		case "enum":
			arr, ok := v.([]any)
			if !ok {
				return nil, refuse("enum", "enum at %s must be an array", at)
			}
			own.hasEnum, own.enum = true, arr
		case "const":
			own.hasEnum, own.enum = true, []any{v}
		case "minLength", "maxLength", "minProperties", "maxProperties", "minItems", "maxItems":
			x, err := nonNegInt(k, v)
			if err != nil {
				return nil, err
			}
			count, t := own.countKeyword(k)
			*count = x
			own.typeKeywords |= t
		case "pattern":
			p, ok := v.(string)
			if !ok {
				return nil, refuse("pattern", "pattern at %s must be a string", at)
			}
			if _, err := parseRegex(p); err != nil {
				return nil, wrapKeyword("pattern", at, err)
			}
			own.patterns = append(own.patterns, p)
			own.typeKeywords |= tString
		case "format":
			f, ok := v.(string)
			if !ok {
				return nil, refuse("format", "format at %s must be a string", at)
			}
			if _, ok := formatPatterns[f]; !ok {
				return nil, refuse("format", "format %q at %s cannot be enforced; the formats this server generates are %s", f, at, formatNames())
			}
			own.formats = append(own.formats, f)
			own.typeKeywords |= tString
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			num, ok := v.(json.Number)
			if !ok {
				return nil, refuse(k, "%s at %s must be a number (draft-04's boolean form is not supported)", k, at)
			}
			r, ok := numberRat(num)
			if !ok {
				return nil, refuse(k, "%s %s at %s is out of range", k, num, at)
			}
			b := &numBound{v: r, incl: !strings.HasPrefix(k, "exclusive"), src: string(num)}
			if strings.HasSuffix(k, "inimum") {
				own.lo = tighterLo(own.lo, b)
			} else {
				own.hi = tighterHi(own.hi, b)
			}
			own.typeKeywords |= tInteger | tFraction
		case "properties":
			props, ok := v.(*jsonObject)
			if !ok {
				return nil, refuse(k, "properties at %s must be an object", at)
			}
			for j, name := range props.keys {
				s, err := c.node(props.vals[j], n, n.path+"/properties/"+escapePointer(name))
				if err != nil {
					return nil, err
				}
				own.props = append(own.props, propCons{name, conj{s}})
			}
			own.typeKeywords |= tObject
		case "required":
			arr, ok := v.([]any)
			if !ok {
				return nil, refuse(k, "required at %s must be an array of names", at)
			}
			for _, e := range arr {
				s, ok := e.(string)
				if !ok {
					return nil, refuse(k, "required at %s lists %v, not a name", at, e)
				}
				if !slices.Contains(own.required, s) {
					own.required = append(own.required, s)
				}
			}
			own.typeKeywords |= tObject
		case "additionalProperties":
			s, err := sub(k, v)
			if err != nil {
				return nil, err
			}
			own.addl, own.addlSet = conj{s}, true
			own.typeKeywords |= tObject
		case "unevaluatedProperties":
			s, err := sub(k, v)
			if err != nil {
				return nil, err
			}
			uneval, unevalSet = conj{s}, true
			own.evalProps = true
			own.typeKeywords |= tObject
		case "patternProperties":
			if po, ok := v.(*jsonObject); !ok || len(po.keys) > 0 {
				return nil, refuse(k, "patternProperties at %s cannot be enforced (property names chosen by pattern); list the properties under properties", at)
			}
		case "propertyNames":
			if !isTrivialSchema(v) {
				return nil, refuse(k, "propertyNames at %s cannot be enforced together with generated property names; list the properties under properties", at)
			}
		case "dependentRequired", "dependentSchemas", "dependencies":
			if do, ok := v.(*jsonObject); !ok || len(do.keys) > 0 {
				return nil, refuse(k, "%s at %s cannot be enforced (requirements that depend on which properties are present); state them with required", k, at)
			}
		case "items":
			if arr, ok := v.([]any); ok {
				itemsIsArray = true
				for j, e := range arr {
					s, err := c.node(e, n, n.path+"/items/"+strconv.Itoa(j))
					if err != nil {
						return nil, err
					}
					itemsArray = append(itemsArray, s)
				}
			} else {
				s, err := sub(k, v)
				if err != nil {
					return nil, err
				}
				own.items, own.itemsSet = conj{s}, true
			}
			own.typeKeywords |= tArray
		case "prefixItems":
			ss, err := subs(k, v)
			if err != nil {
				return nil, err
			}
			for _, s := range ss {
				own.prefix = append(own.prefix, conj{s})
			}
			own.typeKeywords |= tArray
		case "additionalItems":
			s, err := sub(k, v)
			if err != nil {
				return nil, err
			}
			additionalItems = s
			own.typeKeywords |= tArray
		case "unevaluatedItems":
			s, err := sub(k, v)
			if err != nil {
				return nil, err
			}
			unevalItems, unevalItemsSet = conj{s}, true
			own.typeKeywords |= tArray
		case "uniqueItems":
			if b, ok := v.(bool); !ok || b {
				return nil, refuse(k, "uniqueItems at %s cannot be enforced by a grammar (items would have to be compared); leave it out", at)
			}
		case "contains", "minContains", "maxContains":
			return nil, refuse(k, "%s at %s cannot be enforced by a grammar; describe the items with items or prefixItems", k, at)
		case "multipleOf":
			return nil, refuse(k, "multipleOf at %s cannot be enforced; use minimum/maximum, or an enum of the allowed values", at)
		case "not":
			return nil, refuse(k, "not at %s cannot be enforced by a grammar (complements of schemas); state what is allowed instead", at)
		case "if":
			return nil, refuse(k, "if/then/else at %s cannot be enforced by a grammar; use anyOf of the cases", at)
		case "then", "else":
			if hasIf {
				return nil, refuse("if", "if/then/else at %s cannot be enforced by a grammar; use anyOf of the cases", at)
			}
			// Without "if" they have no effect (JSON Schema 2020-12, 10.2.2).
		case "allOf":
			ss, err := subs(k, v)
			if err != nil {
				return nil, err
			}
			allOf = append(allOf, ss...)
		case "anyOf":
			ss, err := subs(k, v)
			if err != nil {
				return nil, err
			}
			anyOfs = append(anyOfs, ss)
		case "oneOf":
			ss, err := subs(k, v)
			if err != nil {
				return nil, err
			}
			oneOfs = append(oneOfs, ss)
		default:
			return nil, refuse(k, "keyword %q at %s is not a JSON Schema keyword this server enforces (it knows draft 2020-12 and draft-07; vendor extensions must start with x-)", k, at)
		}
	}
	if itemsIsArray {
		for _, s := range itemsArray {
			own.prefix = append(own.prefix, conj{s})
		}
		if additionalItems != nil {
			own.items, own.itemsSet = conj{additionalItems}, true
		}
	}
	alts := []*cset{own}
	var err error
	for _, s := range allOf {
		more, err := c.collect(s)
		if err != nil {
			return nil, err
		}
		if alts, err = c.product(alts, more, n); err != nil {
			return nil, err
		}
	}
	for _, group := range anyOfs {
		var options []*cset
		for _, s := range group {
			more, err := c.collect(s)
			if err != nil {
				return nil, err
			}
			options = append(options, more...)
		}
		if alts, err = c.product(alts, options, n); err != nil {
			return nil, err
		}
	}
	for _, group := range oneOfs {
		var options []*cset
		var perOption [][]*cset
		for _, s := range group {
			more, err := c.collect(s)
			if err != nil {
				return nil, err
			}
			perOption = append(perOption, more)
			options = append(options, more...)
		}
		if err := c.checkDisjoint(perOption, at); err != nil {
			return nil, err
		}
		if alts, err = c.product(alts, options, n); err != nil {
			return nil, err
		}
	}
	// unevaluatedProperties: the names no merged subschema evaluated.
	// unevaluatedItems: the positions past every listed one.
	for _, a := range alts {
		if unevalSet && !a.addlSet {
			a.addl, a.addlSet = uneval, true
		}
		if unevalItemsSet && !a.itemsSet {
			a.items, a.itemsSet = unevalItems, true
		}
	}
	return alts, nil
}

func wrapKeyword(k, at string, err error) error {
	if e, ok := err.(*Error); ok {
		kw := e.Keyword
		if kw == "" {
			kw = k
		}
		return &Error{Keyword: kw, Limit: e.Limit, msg: fmt.Sprintf("%s at %s: %s", k, at, e.msg)}
	}
	return err
}

func isTrivialSchema(v any) bool {
	switch t := v.(type) {
	case bool:
		return t
	case *jsonObject:
		return len(t.keys) == 0
	}
	return false
}

// node is the snode of a subschema value found under n.
func (c *schemaCompiler) node(v any, n *snode, path string) (*snode, error) {
	if o, ok := v.(*jsonObject); ok {
		if s, ok := c.doc.byObj[o]; ok {
			return s, nil
		}
		return c.doc.index(o, n.base, path, 0)
	}
	if b, ok := v.(bool); ok {
		return c.doc.newNode(b, n.base, path), nil
	}
	return nil, refuse("", "the subschema at %s is %s, not an object or a boolean", path, jsonKind(v))
}

// checkDisjoint refuses a oneOf whose options might both match a value:
// a grammar can only generate "exactly one" when at most one can match.
func (c *schemaCompiler) checkDisjoint(options [][]*cset, at string) error {
	for i := range options {
		for j := i + 1; j < len(options); j++ {
			for _, a := range options[i] {
				for _, b := range options[j] {
					if !c.disjoint(a, b) {
						return refuse("oneOf", "oneOf at %s has options %d and %d that a value could match both of, so \"exactly one\" cannot be enforced; make the options exclusive (different types, or a property with different const values) or use anyOf", at, i, j)
					}
				}
			}
		}
	}
	return nil
}

// disjoint reports whether no value can match both a and b (false when
// it cannot tell).
func (c *schemaCompiler) disjoint(a, b *cset) bool {
	ta, tb := a.types, b.types
	if ta&tb == 0 {
		return true
	}
	if a.hasEnum && b.hasEnum {
		for _, x := range a.enum {
			for _, y := range b.enum {
				if jsonEqual(x, y) {
					return false
				}
			}
		}
		return true
	}
	if a.hasEnum || b.hasEnum {
		e, other := a, b
		if !a.hasEnum {
			e, other = b, a
		}
		for _, v := range e.enum {
			if c.valid(v, other, true, 0) {
				return false
			}
		}
		return true
	}
	// Objects told apart by a property both require with disjoint values.
	if ta&tb == tObject {
		for _, r := range a.required {
			if !slices.Contains(b.required, r) {
				continue
			}
			ca, _ := a.prop(r)
			cb, _ := b.prop(r)
			aa, err1 := c.collectConj(ca)
			bb, err2 := c.collectConj(cb)
			if err1 != nil || err2 != nil || len(ca) == 0 || len(cb) == 0 {
				continue
			}
			all := true
			for _, x := range aa {
				for _, y := range bb {
					if !c.disjoint(x, y) {
						all = false
					}
				}
			}
			if all {
				return true
			}
		}
	}
	return false
}
