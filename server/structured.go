package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/cpmla/cpmla/grammar"
	"github.com/cpmla/cpmla/sampler"
)

// Structured output, as vLLM's API asks for it: response_format
// ({"type":"json_object"} or {"type":"json_schema","json_schema":{"name",
// "schema","strict","description"}}), structured_outputs ({"json",
// "regex", "choice", "grammar", "json_object", and the options
// "disable_any_whitespace", "disable_additional_properties",
// "whitespace_pattern"}), and vLLM's older guided_json, guided_regex,
// guided_choice, guided_grammar and guided_whitespace_pattern. One
// constraint per request; response_format overrides structured_outputs'
// constraint as in vLLM. The grammar package compiles it (after
// admission, within its limits) and every sequence's draws follow it.

// keptGrammarBytes bounds the masks of the compiled grammars a server keeps
// for constraints that come back.
const keptGrammarBytes = 512 << 20

// ResponseFormat is the response_format object.
type ResponseFormat struct {
	Type       string            `json:"type"`
	JSONSchema *JSONSchemaFormat `json:"json_schema"`
}

// JSONSchemaFormat is response_format's json_schema object. Strict asks
// the server to enforce the schema, which it always does.
type JSONSchemaFormat struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

// StructuredOutputs is vLLM's structured_outputs object.
type StructuredOutputs struct {
	// JSON is a schema, as an object or as a string holding one.
	JSON                        json.RawMessage `json:"json"`
	Regex                       *string         `json:"regex"`
	Choice                      []string        `json:"choice"`
	Grammar                     *string         `json:"grammar"`
	JSONObject                  *bool           `json:"json_object"`
	DisableAnyWhitespace        bool            `json:"disable_any_whitespace"`
	DisableAdditionalProperties bool            `json:"disable_additional_properties"`
	WhitespacePattern           *string         `json:"whitespace_pattern"`
	StructuralTag               json.RawMessage `json:"structural_tag"`
}

// strictObject decodes an object into v and refuses keys v does not name.
func strictObject(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// UnmarshalJSON refuses keys response_format does not have.
func (f *ResponseFormat) UnmarshalJSON(b []byte) error {
	type plain ResponseFormat
	return strictObject(b, (*plain)(f))
}

// UnmarshalJSON refuses keys json_schema does not have.
func (f *JSONSchemaFormat) UnmarshalJSON(b []byte) error {
	type plain JSONSchemaFormat
	return strictObject(b, (*plain)(f))
}

// UnmarshalJSON refuses keys structured_outputs does not have.
func (s *StructuredOutputs) UnmarshalJSON(b []byte) error {
	type plain StructuredOutputs
	return strictObject(b, (*plain)(s))
}

// structuredFields are the request fields of structured output (shared by
// both endpoints).
type structuredFields struct {
	ResponseFormat          *ResponseFormat    `json:"response_format"`
	StructuredOutputs       *StructuredOutputs `json:"structured_outputs"`
	GuidedJSON              json.RawMessage    `json:"guided_json"`
	GuidedRegex             *string            `json:"guided_regex"`
	GuidedChoice            []string           `json:"guided_choice"`
	GuidedGrammar           *string            `json:"guided_grammar"`
	GuidedWhitespacePattern *string            `json:"guided_whitespace_pattern"`
}

// structuredFieldNames are the fields above, for fields.go.
var structuredFieldNames = []string{"response_format", "structured_outputs", "guided_json", "guided_regex",
	"guided_choice", "guided_grammar", "guided_whitespace_pattern"}

func isNull(b json.RawMessage) bool {
	t := bytes.TrimSpace(b)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// schemaText is the schema of a json field: an object, or a string that
// holds one.
func schemaText(param string, b json.RawMessage) (string, *apiError) {
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return "", badRequest(param, "%s is not a JSON string: %v", param, err)
		}
		return s, nil
	}
	if len(t) == 0 || (t[0] != '{' && !bytes.Equal(t, []byte("true")) && !bytes.Equal(t, []byte("false"))) {
		return "", badRequest(param, "%s must be a JSON schema (an object or a boolean), or a string holding one", param)
	}
	return string(t), nil
}

// parseStructured reads the structured-output fields into j.spec (nil
// when the request has none).
func (s *Server) parseStructured(f *structuredFields, j *job) *apiError {
	type choice struct {
		param string
		spec  grammar.Spec
	}
	var set []choice
	add := func(param string, spec grammar.Spec) { set = append(set, choice{param, spec}) }
	guided := false
	if !isNull(f.GuidedJSON) {
		text, e := schemaText("guided_json", f.GuidedJSON)
		if e != nil {
			return e
		}
		add("guided_json", grammar.Spec{Kind: grammar.KindJSONSchema, Text: text})
		guided = true
	}
	if f.GuidedRegex != nil {
		add("guided_regex", grammar.Spec{Kind: grammar.KindRegex, Text: *f.GuidedRegex})
		guided = true
	}
	if f.GuidedChoice != nil {
		add("guided_choice", grammar.Spec{Kind: grammar.KindChoice, Choices: f.GuidedChoice})
		guided = true
	}
	if f.GuidedGrammar != nil {
		add("guided_grammar", grammar.Spec{Kind: grammar.KindGrammar, Text: *f.GuidedGrammar})
		guided = true
	}
	so := f.StructuredOutputs
	if so != nil {
		if guided {
			return badRequest("structured_outputs", "structured_outputs and the guided_* fields both ask for a constraint; give one of them (structured_outputs is vLLM's current form)")
		}
		if !isNull(so.StructuralTag) {
			return badRequest("structured_outputs.structural_tag", "structural_tag (constraints that start at trigger strings) is not supported; constrain the whole output with json, regex, choice or grammar")
		}
		if !isNull(so.JSON) {
			text, e := schemaText("structured_outputs.json", so.JSON)
			if e != nil {
				return e
			}
			add("structured_outputs.json", grammar.Spec{Kind: grammar.KindJSONSchema, Text: text})
		}
		if so.Regex != nil {
			add("structured_outputs.regex", grammar.Spec{Kind: grammar.KindRegex, Text: *so.Regex})
		}
		if so.Choice != nil {
			add("structured_outputs.choice", grammar.Spec{Kind: grammar.KindChoice, Choices: so.Choice})
		}
		if so.Grammar != nil {
			add("structured_outputs.grammar", grammar.Spec{Kind: grammar.KindGrammar, Text: *so.Grammar})
		}
		if so.JSONObject != nil {
			if !*so.JSONObject {
				return badRequest("structured_outputs.json_object", "structured_outputs.json_object is false, which asks for no constraint; leave it out or set it to true")
			}
			add("structured_outputs.json_object", grammar.Spec{Kind: grammar.KindJSONObject})
		}
	}
	if rf := f.ResponseFormat; rf != nil {
		var spec grammar.Spec
		switch rf.Type {
		case "text":
			if rf.JSONSchema != nil {
				return badRequest("response_format.json_schema", "response_format type \"text\" takes no json_schema; use type \"json_schema\"")
			}
		case "json_object":
			spec = grammar.Spec{Kind: grammar.KindJSONObject}
		case "json_schema":
			if rf.JSONSchema == nil || isNull(rf.JSONSchema.Schema) {
				return badRequest("response_format.json_schema", "response_format type \"json_schema\" needs json_schema.schema, e.g. {\"type\":\"json_schema\",\"json_schema\":{\"name\":\"answer\",\"schema\":{\"type\":\"object\"}}}")
			}
			text, e := schemaText("response_format.json_schema.schema", rf.JSONSchema.Schema)
			if e != nil {
				return e
			}
			spec = grammar.Spec{Kind: grammar.KindJSONSchema, Text: text}
		case "structural_tag":
			return badRequest("response_format", "response_format type \"structural_tag\" is not supported; use \"json_schema\" or \"json_object\"")
		default:
			return badRequest("response_format", "response_format type %q is not one of text, json_object, json_schema", rf.Type)
		}
		if spec.Kind != 0 {
			// As in vLLM, response_format replaces structured_outputs'
			// constraint and keeps its options.
			set = []choice{{"response_format", spec}}
		}
	}
	switch len(set) {
	case 0:
		if so != nil && (so.DisableAnyWhitespace || so.DisableAdditionalProperties || so.WhitespacePattern != nil) {
			return badRequest("structured_outputs", "structured_outputs has options but no constraint; add json, regex, choice, grammar or json_object")
		}
		if f.GuidedWhitespacePattern != nil {
			return badRequest("guided_whitespace_pattern", "guided_whitespace_pattern applies to guided_json, which the request does not give")
		}
		return nil
	case 1:
	default:
		names := make([]string, len(set))
		for i, c := range set {
			names[i] = c.param
		}
		return badRequest(set[1].param, "the request asks for %d constraints (%s); give exactly one", len(set), strings.Join(names, ", "))
	}
	spec, param := set[0].spec, set[0].param
	isJSON := spec.Kind == grammar.KindJSONSchema || spec.Kind == grammar.KindJSONObject
	if so != nil {
		spec.NoWhitespace = so.DisableAnyWhitespace
		spec.NoAdditionalProperties = so.DisableAdditionalProperties
		if so.WhitespacePattern != nil {
			spec.WhitespacePattern = *so.WhitespacePattern
		}
		if !isJSON && (so.DisableAnyWhitespace || so.DisableAdditionalProperties || so.WhitespacePattern != nil) {
			return badRequest("structured_outputs", "disable_any_whitespace, disable_additional_properties and whitespace_pattern apply to JSON constraints, and the request's is %s", spec.Kind)
		}
	}
	if f.GuidedWhitespacePattern != nil {
		if spec.Kind != grammar.KindJSONSchema {
			return badRequest("guided_whitespace_pattern", "guided_whitespace_pattern applies to guided_json, which the request does not give")
		}
		spec.WhitespacePattern = *f.GuidedWhitespacePattern
	}
	if spec.NoWhitespace && spec.WhitespacePattern != "" {
		return badRequest("structured_outputs", "disable_any_whitespace and whitespace_pattern contradict each other; give one")
	}
	switch {
	case j.ignoreEOS:
		return badRequest("ignore_eos", "ignore_eos cannot be combined with a structured output (%s): the constraint decides where the output ends; leave ignore_eos out", param)
	case j.params.MinTokens > 0:
		return badRequest("min_tokens", "min_tokens %d cannot be combined with a structured output (%s): the constraint decides where the output ends; leave min_tokens out", j.params.MinTokens, param)
	}
	j.spec, j.specParam = &spec, param
	return nil
}

// compileConstraint compiles j's constraint (after admission: compiling
// costs up to the grammar limits' time).
func (s *Server) compileConstraint(j *job) (*grammar.Grammar, *apiError) {
	if j.spec == nil {
		return nil, nil
	}
	g, err := s.grammars.Compile(*j.spec)
	if err != nil {
		var ge *grammar.Error
		if errors.As(err, &ge) {
			return nil, badRequest(j.specParam, "%s: %v", j.specParam, ge)
		}
		return nil, &apiError{status: http.StatusInternalServerError, typ: "server_error", param: j.specParam,
			msg: fmt.Sprintf("%s: the vocabulary for structured output: %v", j.specParam, err)}
	}
	return g, nil
}

// matchers makes one grammar matcher per sequence of an engine request.
type matchers struct{ g *grammar.Grammar }

func (m matchers) NewConstraint(end []int, maxTokens int) (sampler.Constraint, error) {
	return m.g.NewMatcher(grammar.MatcherOptions{EndTokens: slices.Clone(end), MaxTokens: maxTokens})
}
