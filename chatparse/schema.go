package chatparse

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Tool is a function a request offers the model: its name and its JSON
// Schema parameters (nil when the tool takes none). The parsers read the
// schema's "properties" to type the arguments they extract.
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// toolSchemas holds the decoded "properties" of each tool, by tool name.
// The first tool of a name wins, as vLLM's lookups take the first match.
type toolSchemas map[string]map[string]any

func buildSchemas(tools []Tool) (toolSchemas, error) {
	s := make(toolSchemas, len(tools))
	for i, t := range tools {
		if _, dup := s[t.Name]; dup {
			continue
		}
		props := map[string]any{}
		if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
			var params any
			if err := json.Unmarshal(t.Parameters, &params); err != nil {
				return nil, fmt.Errorf("tools[%d] (%q) parameters: %w", i, t.Name, err)
			}
			if m, ok := params.(map[string]any); ok {
				if p, ok := m["properties"].(map[string]any); ok {
					props = p
				}
			}
		}
		s[t.Name] = props
	}
	return s, nil
}

// isStringArg is the GLM parsers' test: the tool exists and the argument's
// schema has "type": "string" (exactly; a list of types does not count).
func (s toolSchemas) isStringArg(tool, arg string) bool {
	props, ok := s[tool]
	if !ok {
		return false
	}
	p, _ := props[arg].(map[string]any)
	t, _ := p["type"].(string)
	return t == "string"
}

// schemaTypes collects the JSON Schema types an argument may have: "type"
// (a string or a list), the types of "enum" values, and recursively
// anyOf/oneOf/allOf. No information means ["string"].
func schemaTypes(schema any) map[string]bool {
	types := map[string]bool{}
	m, ok := schema.(map[string]any)
	if !ok {
		return map[string]bool{"string": true}
	}
	switch t := m["type"].(type) {
	case string:
		types[t] = true
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok {
				types[s] = true
			}
		}
	}
	if enum, ok := m["enum"].([]any); ok {
		for _, e := range enum {
			switch x := e.(type) {
			case nil:
				types["null"] = true
			case bool:
				types["boolean"] = true
			case float64:
				// encoding/json decodes every number as float64; an
				// integral one is Python's int.
				if x == math.Trunc(x) {
					types["integer"] = true
				} else {
					types["number"] = true
				}
			case string:
				types["string"] = true
			case []any:
				types["array"] = true
			case map[string]any:
				types["object"] = true
			}
		}
	}
	for _, field := range []string{"anyOf", "oneOf", "allOf"} {
		if choices, ok := m[field].([]any); ok {
			for _, c := range choices {
				for t := range schemaTypes(c) {
					types[t] = true
				}
			}
		}
	}
	if len(types) == 0 {
		types["string"] = true
	}
	return types
}

// typeAliases are the loose type names models and schemas use.
var typeAliases = map[string]string{
	"str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
	"int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
	"uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
	"float": "number", "float32": "number", "float64": "number", "double": "number",
	"bool": "boolean", "dict": "object", "arr": "array", "list": "array", "sequence": "array",
}

// coerce converts a raw argument text to the first schema type it fits, in
// the order null, integer, number, boolean, object, array, string; with no
// fitting type it tries JSON and keeps the raw text otherwise.
func coerce(raw string, types map[string]bool) value {
	norm := map[string]bool{}
	for t := range types {
		t = strings.ToLower(pyStrip(t))
		if a, ok := typeAliases[t]; ok {
			t = a
		}
		norm[t] = true
	}
	for _, t := range []string{"null", "integer", "number", "boolean", "object", "array", "string"} {
		if !norm[t] {
			continue
		}
		switch t {
		case "null":
			if strings.ToLower(raw) == "null" {
				return nil
			}
		case "string":
			return raw
		case "integer":
			if n, ok := pyInt(raw); ok {
				return n
			}
		case "number":
			f, ok := pyFloat(raw)
			if !ok || math.IsInf(f, 0) || math.IsNaN(f) {
				continue
			}
			if f == math.Trunc(f) {
				return integralFloat(f)
			}
			return f
		case "boolean":
			switch strings.ToLower(pyStrip(raw)) {
			case "true", "1":
				return true
			case "false", "0":
				return false
			}
		case "object", "array":
			if v, err := jsonLoads(raw); err == nil && finiteJSON(v) {
				return v
			}
		}
	}
	if v, err := jsonLoads(raw); err == nil && finiteJSON(v) {
		return v
	}
	return raw
}

// pyInt is Python's int(s) in base 10: surrounding whitespace, a sign,
// digits with single underscores between them.
func pyInt(s string) (*big.Int, bool) {
	s = pyStrip(s)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" || !validUnderscores(body) {
		return nil, false
	}
	for i := 0; i < len(body); i++ {
		if c := body[i]; c != '_' && (c < '0' || c > '9') {
			return nil, false
		}
	}
	n, ok := new(big.Int).SetString(strings.ReplaceAll(s, "_", ""), 10)
	return n, ok
}

// pyFloat is Python's float(s): whitespace, a sign, decimal digits with
// underscores, an exponent, or inf/infinity/nan in any case.
func pyFloat(s string) (float64, bool) {
	s = pyStrip(s)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" {
		return 0, false
	}
	switch strings.ToLower(body) {
	case "inf", "infinity":
		if s[0] == '-' {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case "nan":
		return math.NaN(), true
	}
	for i := 0; i < len(body); i++ {
		c := body[i] | 0x20
		if !(c >= '0' && c <= '9') && c != '.' && c != 'e' && body[i] != '_' && body[i] != '+' && body[i] != '-' {
			return 0, false
		}
	}
	if !validUnderscores(body) {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f, true
		}
		return 0, false
	}
	return f, true
}
