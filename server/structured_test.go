package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/cpmla/cpmla/config"
)

// A schema whose outputs are short whatever the (random) model prefers.
const smallSchema = `{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":0,"maximum":99},"kind":{"enum":["a","b","c"]}},"required":["ok","n","kind"],"additionalProperties":false}`

func mustValidate(t *testing.T, schema, text string) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%q does not parse: %v", text, err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("%q does not validate: %v", text, err)
	}
}

// post sends body to path and returns the status and the raw answer.
func (r *realEnv) post(t *testing.T, path string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.hc.Post(r.url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// TestStructuredOutputs serves every form of vLLM's structured output on
// both endpoints (through the official OpenAI client and as raw bodies),
// whole and streamed, with n = 2 and stop strings, and checks each output
// against its constraint with an independent JSON-Schema validator.
func TestStructuredOutputs(t *testing.T) {
	r := newRealEnv(t)
	ctx := context.Background()
	noWS := map[string]any{"disable_any_whitespace": true}

	// Chat through the official client: response_format json_schema, strict.
	var schema map[string]any
	if err := json.Unmarshal([]byte(smallSchema), &schema); err != nil {
		t.Fatal(err)
	}
	cp := openai.ChatCompletionNewParams{Model: config.DefaultPreset, MaxTokens: openai.Int(40), Seed: openai.Int(3), N: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Reply in JSON.")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Schema: schema, Strict: openai.Bool(true)}}}}
	resp, err := r.client.Chat.Completions.New(ctx, cp, option.WithJSONSet("structured_outputs", noWS))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 2 {
		t.Fatalf("%d choices, want 2", len(resp.Choices))
	}
	for _, c := range resp.Choices {
		if c.FinishReason != "stop" {
			t.Fatalf("choice %d finished %q: %q", c.Index, c.FinishReason, c.Message.Content)
		}
		mustValidate(t, smallSchema, c.Message.Content)
	}

	// Completions through the official client: vLLM's structured_outputs
	// as an extra field, whole and streamed.
	compParams := openai.CompletionNewParams{Model: config.DefaultPreset, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Answer:")},
		MaxTokens: openai.Int(40), Seed: openai.Int(5), N: openai.Int(2)}
	soJSON := option.WithJSONSet("structured_outputs", map[string]any{"json": schema, "disable_any_whitespace": true})
	comp, err := r.client.Completions.New(ctx, compParams, soJSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(comp.Choices) != 2 {
		t.Fatalf("%d completion choices, want 2", len(comp.Choices))
	}
	for _, c := range comp.Choices {
		if c.FinishReason != "stop" {
			t.Fatalf("completion choice %d finished %q: %q", c.Index, c.FinishReason, c.Text)
		}
		mustValidate(t, smallSchema, c.Text)
	}
	compParams.N = openai.Int(1)
	st := r.client.Completions.NewStreaming(ctx, compParams, soJSON)
	var streamed strings.Builder
	finish := ""
	for st.Next() {
		for _, c := range st.Current().Choices {
			streamed.WriteString(c.Text)
			if c.FinishReason != "" {
				finish = string(c.FinishReason)
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if finish != "stop" {
		t.Fatalf("streamed completion finished %q: %q", finish, streamed.String())
	}
	mustValidate(t, smallSchema, streamed.String())
	if streamed.String() != comp.Choices[0].Text {
		t.Errorf("streamed %q, whole %q: the same seed must give the same output", streamed.String(), comp.Choices[0].Text)
	}

	// Streamed chat, json_object.
	cs := r.client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: config.DefaultPreset, MaxTokens: openai.Int(60), Seed: openai.Int(8),
		Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("JSON please")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}})
	var acc openai.ChatCompletionAccumulator
	for cs.Next() {
		acc.AddChunk(cs.Current())
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	if c := acc.Choices[0]; c.FinishReason == "stop" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(c.Message.Content), &obj); err != nil {
			t.Fatalf("streamed json_object %q: %v", c.Message.Content, err)
		}
	} else if c.FinishReason != "length" {
		t.Fatalf("streamed json_object finished %q", c.FinishReason)
	}

	// Completions: every field form.
	type completion struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	for _, c := range []struct {
		name  string
		body  map[string]any
		check func(t *testing.T, text string)
	}{
		{"guided_json", map[string]any{"guided_json": json.RawMessage(smallSchema)},
			func(t *testing.T, s string) { mustValidate(t, smallSchema, s) }},
		{"structured_outputs.json string", map[string]any{"structured_outputs": map[string]any{"json": smallSchema, "disable_any_whitespace": true}},
			func(t *testing.T, s string) { mustValidate(t, smallSchema, s) }},
		{"guided_regex", map[string]any{"guided_regex": `[A-Z]{2}-\d{3}`},
			func(t *testing.T, s string) { matchRegex(t, `^[A-Z]{2}-\d{3}$`, s) }},
		{"structured_outputs.regex", map[string]any{"structured_outputs": map[string]any{"regex": `(yes|no)!?`}},
			func(t *testing.T, s string) { matchRegex(t, `^(yes|no)!?$`, s) }},
		{"guided_choice", map[string]any{"guided_choice": []string{"red", "green", "blue 🙂"}},
			func(t *testing.T, s string) { matchRegex(t, `^(red|green|blue 🙂)$`, s) }},
		{"structured_outputs.choice", map[string]any{"structured_outputs": map[string]any{"choice": []string{"positive", "negative"}}},
			func(t *testing.T, s string) { matchRegex(t, `^(positive|negative)$`, s) }},
		{"guided_grammar", map[string]any{"guided_grammar": "root ::= \"(\" [0-9] (\"+\" [0-9]){0,3} \")\""},
			func(t *testing.T, s string) { matchRegex(t, `^\([0-9](\+[0-9]){0,3}\)$`, s) }},
		{"structured_outputs.grammar", map[string]any{"structured_outputs": map[string]any{"grammar": "root ::= \"ok\" | \"fail\""}},
			func(t *testing.T, s string) { matchRegex(t, `^(ok|fail)$`, s) }},
	} {
		for _, stream := range []bool{false, true} {
			body := map[string]any{"model": config.DefaultPreset, "prompt": "The answer:", "max_tokens": 40, "seed": 11, "n": 2, "stream": stream}
			for k, v := range c.body {
				if v != nil {
					body[k] = v
				}
			}
			status, raw := r.post(t, "/v1/completions", body)
			if status != http.StatusOK {
				t.Fatalf("%s: status %d: %s", c.name, status, raw)
			}
			texts := make([]string, 2)
			finish := make([]string, 2)
			if stream {
				for _, line := range strings.Split(string(raw), "\n") {
					data, ok := strings.CutPrefix(line, "data: ")
					if !ok || data == "[DONE]" {
						continue
					}
					var chunk struct {
						Choices []struct {
							Index        int     `json:"index"`
							Text         string  `json:"text"`
							FinishReason *string `json:"finish_reason"`
						} `json:"choices"`
					}
					if err := json.Unmarshal([]byte(data), &chunk); err != nil {
						t.Fatalf("%s: chunk %q: %v", c.name, data, err)
					}
					for _, ch := range chunk.Choices {
						texts[ch.Index] += ch.Text
						if ch.FinishReason != nil {
							finish[ch.Index] = *ch.FinishReason
						}
					}
				}
			} else {
				var out completion
				if err := json.Unmarshal(raw, &out); err != nil {
					t.Fatal(err)
				}
				for i, ch := range out.Choices {
					texts[i], finish[i] = ch.Text, ch.FinishReason
				}
			}
			for i := range 2 {
				if finish[i] == "length" && c.name == "guided_json" {
					continue // free whitespace may run past max_tokens
				}
				if finish[i] != "stop" {
					t.Fatalf("%s stream %v choice %d finished %q: %q", c.name, stream, i, finish[i], texts[i])
				}
				c.check(t, texts[i])
			}
		}
	}

	// A stop string cuts the output as it would any other.
	var out completion
	r.postJSON(t, "/v1/completions", map[string]any{"model": config.DefaultPreset, "prompt": "x", "max_tokens": 20,
		"guided_choice": []string{"abc-def"}, "stop": []string{"-"}}, &out)
	if got := out.Choices[0]; got.Text != "abc" || got.FinishReason != "stop" {
		t.Fatalf("stop string: %+v, want the text before it", got)
	}
}

func matchRegex(t *testing.T, re, s string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(s) {
		t.Fatalf("%q does not match %s", s, re)
	}
}

// TestStructuredOutputRefusals: what cannot be enforced, or does not make
// sense together, is refused with 400 naming the field.
func TestStructuredOutputRefusals(t *testing.T) {
	r := newRealEnv(t)
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"model": config.DefaultPreset, "prompt": "x", "max_tokens": 4}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for _, c := range []struct {
		body  map[string]any
		param string
		msg   string
	}{
		{base(map[string]any{"guided_json": map[string]any{"type": "array", "uniqueItems": true}}), "guided_json", "uniqueItems"},
		{base(map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{"not": map[string]any{}}}}}), "response_format", "not at the root"},
		{base(map[string]any{"response_format": map[string]any{"type": "json_schema"}}), "response_format.json_schema", "needs json_schema.schema"},
		{base(map[string]any{"response_format": map[string]any{"type": "json_object", "schema": map[string]any{}}}), "", "unknown field"},
		{base(map[string]any{"response_format": map[string]any{"type": "yaml"}}), "response_format", "not one of"},
		{base(map[string]any{"response_format": map[string]any{"type": "structural_tag"}}), "response_format", "structural_tag"},
		{base(map[string]any{"guided_regex": "a", "guided_choice": []string{"b"}}), "guided_choice", "exactly one"},
		{base(map[string]any{"guided_regex": "a", "structured_outputs": map[string]any{"regex": "b"}}), "structured_outputs", "give one of them"},
		{base(map[string]any{"structured_outputs": map[string]any{"regex": "a", "choice": []string{"b"}}}), "structured_outputs.choice", "exactly one"},
		{base(map[string]any{"structured_outputs": map[string]any{"regex": "a", "disable_any_whitespace": true}}), "structured_outputs", "apply to JSON"},
		{base(map[string]any{"structured_outputs": map[string]any{"json_object": false}}), "structured_outputs.json_object", "false"},
		{base(map[string]any{"structured_outputs": map[string]any{"structural_tag": "{}"}}), "structured_outputs.structural_tag", "not supported"},
		{base(map[string]any{"structured_outputs": map[string]any{"jsn": "{}"}}), "", "unknown field"},
		{base(map[string]any{"guided_regex": `(?=a)`}), "guided_regex", "lookahead"},
		{base(map[string]any{"guided_grammar": `root ::= root "a" | "b"`}), "guided_grammar", "left-recursive"},
		{base(map[string]any{"guided_choice": []string{"a"}, "ignore_eos": true}), "ignore_eos", "ignore_eos"},
		{base(map[string]any{"guided_choice": []string{"a"}, "min_tokens": 2}), "min_tokens", "min_tokens"},
		{base(map[string]any{"guided_json": map[string]any{"type": "string", "maxLength": 10000000}}), "guided_json", "MaxRuleNFAStates"},
		{base(map[string]any{"guided_decoding_backend": "xgrammar"}), "guided_decoding_backend", "not supported"},
	} {
		status, raw := r.post(t, "/v1/completions", c.body)
		var e ErrorBody
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("%v: %s", c.body, raw)
		}
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if status != http.StatusBadRequest || (c.param != "" && param != c.param) || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%v: status %d param %q message %q; want 400 param %q naming %q", c.body, status, param, e.Error.Message, c.param, c.msg)
		}
	}
	// Chat refuses the same way.
	status, raw := r.post(t, "/v1/chat/completions", map[string]any{"model": config.DefaultPreset, "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": "x"}}, "response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "schema": map[string]any{"type": "integer", "multipleOf": 2}}}})
	if status != http.StatusBadRequest || !strings.Contains(string(raw), "multipleOf") {
		t.Errorf("chat: status %d %s; want 400 naming multipleOf", status, raw)
	}
}
