package chatparse

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func strp(s string) *string { return &s }

// counterIDs returns ids "call-1", "call-2", … so results are comparable.
func counterIDs() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("call-%d", n) }
}

var weatherTools = []Tool{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"date":{"type":"string"},"days":{"type":"integer"},"hot":{"type":"boolean"},"ratio":{"type":"number"},"tags":{"type":"array"},"opts":{"type":"object"},"maybe":{"type":["integer","null"]}}}`)},
	{Name: "search", Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}}}`)},
	{Name: "no_params"},
}

func TestParse(t *testing.T) {
	call := func(id int, name, args string) ToolCall {
		return ToolCall{ID: fmt.Sprintf("call-%d", id), Name: name, Arguments: args}
	}
	cases := []struct {
		name string
		opts Options
		text string
		want Message
	}{
		{"glm45 one call, string args raw", Options{ToolParser: "glm45", Tools: weatherTools},
			"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value> Beijing </arg_value>\n<arg_key>date</arg_key>\n<arg_value>2024-06-27</arg_value>\n</tool_call>",
			Message{ToolCalls: []ToolCall{call(1, "get_weather", `{"city": " Beijing ", "date": "2024-06-27"}`)}}},
		{"glm45 content before the call", Options{ToolParser: "glm45", Tools: weatherTools},
			"Let me check.\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>北京 \"天气\"</arg_value>\n</tool_call>",
			Message{Content: strp("Let me check.\n"), ToolCalls: []ToolCall{call(1, "search", `{"query": "北京 \"天气\""}`)}}},
		{"glm45 whitespace-only content is null", Options{ToolParser: "glm45"},
			" \n\t<tool_call>f\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
			Message{ToolCalls: []ToolCall{call(1, "f", `{"a": 1}`)}}},
		{"glm45 typed by schema", Options{ToolParser: "glm45", Tools: weatherTools},
			"<tool_call>get_weather\n<arg_key>days</arg_key><arg_value> 3 </arg_value><arg_key>hot</arg_key><arg_value>True</arg_value><arg_key>tags</arg_key><arg_value>['a', \"b\", (1, 2)]</arg_value><arg_key>opts</arg_key><arg_value>{\"k\": [1.0, 1e16, 1e-5, -0.0]}</arg_value><arg_key>city</arg_key><arg_value>5</arg_value></tool_call>",
			Message{ToolCalls: []ToolCall{call(1, "get_weather", `{"days": 3, "hot": true, "tags": ["a", "b", [1, 2]], "opts": {"k": [1.0, 1e+16, 1e-05, -0.0]}, "city": "5"}`)}}},
		{"glm45 untyped values: JSON, then Python literal, then text", Options{ToolParser: "glm45"},
			"<tool_call>f\n<arg_key>a</arg_key><arg_value>null</arg_value><arg_key>b</arg_key><arg_value>None</arg_value><arg_key>c</arg_key><arg_value>  hello world </arg_value><arg_key>d</arg_key><arg_value>NaN</arg_value><arg_key>e</arg_key><arg_value>{1, 2}</arg_value><arg_key>f</arg_key><arg_value>0x1F</arg_value><arg_key>g</arg_key><arg_value>'it''s'</arg_value></tool_call>",
			Message{ToolCalls: []ToolCall{call(1, "f", `{"a": null, "b": null, "c": "hello world", "d": "NaN", "e": "{1, 2}", "f": 31, "g": "its"}`)}}},
		{"glm45 repeated key keeps its place, last value", Options{ToolParser: "glm45"},
			"<tool_call>f\n<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>b</arg_key><arg_value>2</arg_value><arg_key>a</arg_key><arg_value>3</arg_value></tool_call>",
			Message{ToolCalls: []ToolCall{call(1, "f", `{"a": 3, "b": 2}`)}}},
		{"glm45 two calls", Options{ToolParser: "glm45", Tools: weatherTools},
			"<tool_call>search\n<arg_key>query</arg_key><arg_value>x</arg_value></tool_call>\n<tool_call>no_params\n</tool_call>",
			Message{ToolCalls: []ToolCall{call(1, "search", `{"query": "x"}`), call(2, "no_params", `{}`)}}},
		{"glm45 needs the newline after the name", Options{ToolParser: "glm45"},
			"<tool_call>get_time</tool_call>",
			Message{Content: strp("<tool_call>get_time</tool_call>")}},
		{"glm47 name ends at the first arg_key", Options{ToolParser: "glm47", Tools: weatherTools},
			"<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>\\n<arg_value>2</arg_value></tool_call>",
			Message{ToolCalls: []ToolCall{call(1, "get_weather", `{"city": "Paris", "days": 2}`)}}},
		{"glm47 call without arguments", Options{ToolParser: "glm47"},
			"ok <tool_call> get_time </tool_call>",
			Message{Content: strp("ok "), ToolCalls: []ToolCall{call(1, "get_time", `{}`)}}},
		{"glm unclosed call is no call", Options{ToolParser: "glm47"},
			"text <tool_call>f<arg_key>a</arg_key><arg_value>1",
			Message{Content: strp("text <tool_call>f<arg_key>a</arg_key><arg_value>1")}},
		{"glm unterminated value at the call's end is kept", Options{ToolParser: "glm47", Tools: weatherTools},
			"<tool_call>search<arg_key>query</arg_key><arg_value>abc</tool_call>",
			Message{ToolCalls: []ToolCall{call(1, "search", `{"query": "abc"}`)}}},
		{"no tool call: all content", Options{ToolParser: "glm45"},
			"just text", Message{Content: strp("just text")}},
		{"dsml two invokes", Options{ToolParser: "deepseek_v32", Tools: weatherTools},
			"Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">杭州</｜DSML｜parameter>\n<｜DSML｜parameter name=\"date\" string=\"true\">2024-01-16</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">北京</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
			Message{Content: strp("Checking.\n\n"), ToolCalls: []ToolCall{call(1, "get_weather", `{"city": "杭州", "date": "2024-01-16"}`), call(2, "get_weather", `{"city": "北京"}`)}}},
		{"dsml coerced to schema types", Options{ToolParser: "deepseek_v32", Tools: weatherTools},
			"<｜DSML｜function_calls><｜DSML｜invoke name=\"get_weather\"><｜DSML｜parameter name=\"days\" string=\"false\"> 7 </｜DSML｜parameter><｜DSML｜parameter name=\"ratio\" string=\"false\">2.0</｜DSML｜parameter><｜DSML｜parameter name=\"hot\" string=\"false\">0</｜DSML｜parameter><｜DSML｜parameter name=\"tags\" string=\"false\">[\"a\"]</｜DSML｜parameter><｜DSML｜parameter name=\"maybe\" string=\"false\">null</｜DSML｜parameter><｜DSML｜parameter name=\"city\" string=\"false\">12</｜DSML｜parameter><｜DSML｜parameter name=\"extra\" string=\"false\">{\"x\": 1}</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>",
			Message{ToolCalls: []ToolCall{call(1, "get_weather", `{"days": 7, "ratio": 2, "hot": false, "tags": ["a"], "maybe": null, "city": "12", "extra": "{\"x\": 1}"}`)}}},
		{"dsml unwraps an arguments wrapper", Options{ToolParser: "deepseek_v32", Tools: weatherTools},
			"<｜DSML｜function_calls><｜DSML｜invoke name=\"search\"><｜DSML｜parameter name=\"arguments\" string=\"true\">{\"query\": \"q\"}</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>",
			Message{ToolCalls: []ToolCall{call(1, "search", `{"query": "q"}`)}}},
		{"dsml block without invokes is content", Options{ToolParser: "deepseek_v32"},
			"<｜DSML｜function_calls></｜DSML｜function_calls>",
			Message{Content: strp("<｜DSML｜function_calls></｜DSML｜function_calls>")}},
		{"reasoning r1 without a start tag", Options{ReasoningParser: "deepseek_r1"},
			"step 1</think>The answer.", Message{Reasoning: strp("step 1"), Content: strp("The answer.")}},
		{"reasoning r1 with a start tag", Options{ReasoningParser: "deepseek_r1"},
			"<think>step 1</think>", Message{Reasoning: strp("step 1")}},
		{"reasoning never closed", Options{ReasoningParser: "deepseek_r1"},
			"still thinking <thi", Message{Reasoning: strp("still thinking <thi")}},
		{"glm45 reasoning with thinking disabled is content", Options{ReasoningParser: "glm45", ChatTemplateKwargs: map[string]any{"enable_thinking": false}},
			"abc</think>x", Message{Content: strp("abc</think>x")}},
		{"deepseek_v3 thinks only when asked", Options{ReasoningParser: "deepseek_v3"},
			"abc</think>x", Message{Content: strp("abc</think>x")}},
		{"deepseek_v3 with thinking", Options{ReasoningParser: "deepseek_v3", ChatTemplateKwargs: map[string]any{"thinking": true}},
			"abc</think>x", Message{Reasoning: strp("abc"), Content: strp("x")}},
		{"reasoning then tool call", Options{ReasoningParser: "glm45", ToolParser: "glm47", Tools: weatherTools},
			"<think>need weather</think>\n<tool_call>search<arg_key>query</arg_key><arg_value>rain</arg_value></tool_call>",
			Message{Reasoning: strp("need weather"), ToolCalls: []ToolCall{call(1, "search", `{"query": "rain"}`)}}},
	}
	for _, c := range cases {
		c.opts.NewID = counterIDs()
		got, err := Parse(c.opts, c.text)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
		for _, tc := range got.ToolCalls {
			if !json.Valid([]byte(tc.Arguments)) {
				t.Errorf("%s: arguments %q are not valid JSON", c.name, tc.Arguments)
			}
		}
	}
}

func TestRefusals(t *testing.T) {
	for _, o := range []Options{{ToolParser: "hermes"}, {ReasoningParser: "qwen3"}, {ToolParser: "glm45", Tools: []Tool{{Name: "f", Parameters: json.RawMessage(`{`)}}}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	if err := CheckToolParser("hermes"); err == nil || !strings.Contains(err.Error(), "deepseek_v32, glm45, glm47") {
		t.Errorf("CheckToolParser: %v, want the supported names", err)
	}
}

// streamed is what a client assembles from the deltas.
type streamed struct {
	reasoning, content strings.Builder
	calls              []ToolCall
}

func (s *streamed) add(t *testing.T, d Delta) {
	s.reasoning.WriteString(d.Reasoning)
	s.content.WriteString(d.Content)
	for _, tc := range d.ToolCalls {
		switch {
		case tc.Index == len(s.calls):
			if tc.ID == "" || tc.Name == "" {
				t.Fatalf("first delta of call %d has no id or name: %+v", tc.Index, tc)
			}
			s.calls = append(s.calls, ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		case tc.Index < len(s.calls) && tc.ID == "" && tc.Name == "":
			s.calls[tc.Index].Arguments += tc.Arguments
		default:
			t.Fatalf("delta %+v out of order (%d calls so far)", tc, len(s.calls))
		}
	}
}

// feedInPieces feeds text cut at random character boundaries.
func feedInPieces(t *testing.T, p *Parser, text string, rng *rand.Rand) *streamed {
	s := &streamed{}
	for len(text) > 0 {
		n := 1 + rng.IntN(12)
		cut := 0
		for i := 0; i < n && cut < len(text); i++ {
			_, w := utf8.DecodeRuneInString(text[cut:])
			cut += w
		}
		s.add(t, p.Feed(text[:cut]))
		text = text[cut:]
	}
	s.add(t, p.Close())
	return s
}

// randomText draws text with the characters tags are made of.
func randomText(rng *rand.Rand, n int) string {
	pieces := []string{"a", "b", " ", "\n", "<", ">", "/", "t", "\"", "\\", "'", "{", "}", "é", "杭州", "😀", "👩‍💻", "<tool", "<arg", "</arg", "<think", "<｜DSML", "1", ":", ","}
	var b strings.Builder
	for range n {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

// safeText is randomText that contains no complete tag of the formats.
func safeText(rng *rand.Rand, n int) string {
	for {
		s := randomText(rng, n)
		ok := true
		for _, tag := range []string{thinkStart, thinkEnd, glmCallStart, glmCallEnd, glmKeyStart, glmKeyEnd, glmValStart, glmValEnd, dsmlBlockStart, dsmlBlockEnd, dsmlInvoke, dsmlInvokeEnd, dsmlParam, dsmlParamEnd} {
			if strings.Contains(s, tag) {
				ok = false
			}
		}
		if ok {
			return s
		}
	}
}

var typedValues = []string{"3", "-2.5", "1e16", "true", "False", "None", "null", "[1, 'x']", "{\"k\": {\"n\": [1.0]}}", "(1,)", "plain words", "  7  ", "NaN", "0b101"}

// randomOutput draws a well-formed output of the given parsers: reasoning,
// content, and tool calls with distinct argument names.
func randomOutput(rng *rand.Rand, toolParser string, withReasoning bool) string {
	var b strings.Builder
	if withReasoning {
		if rng.IntN(2) == 0 {
			b.WriteString(thinkStart)
		}
		b.WriteString(safeText(rng, rng.IntN(20)))
		b.WriteString(thinkEnd)
	}
	b.WriteString(safeText(rng, rng.IntN(10)))
	for c := range rng.IntN(3) {
		if c > 0 {
			b.WriteString(safeText(rng, rng.IntN(3)))
		}
		name := []string{"get_weather", "search", "other"}[rng.IntN(3)]
		type arg struct{ k, v string }
		var args []arg
		for i, k := range []string{"city", "query", "days", "opts", "x", "y"} {
			if rng.IntN(2) == 0 {
				continue
			}
			v := typedValues[rng.IntN(len(typedValues))]
			if i < 2 || rng.IntN(3) == 0 {
				v = safeText(rng, rng.IntN(15))
			}
			args = append(args, arg{k, v})
		}
		switch toolParser {
		case "glm45", "glm47":
			b.WriteString(glmCallStart + name)
			if toolParser == "glm45" || rng.IntN(2) == 0 {
				b.WriteString("\n")
			}
			for _, a := range args {
				sep := []string{"", "\n", " \n "}[rng.IntN(3)]
				b.WriteString(glmKeyStart + a.k + glmKeyEnd + sep + glmValStart + a.v + glmValEnd + sep)
			}
			b.WriteString(glmCallEnd)
		case "deepseek_v32":
			b.WriteString(dsmlBlockStart + "\n")
			b.WriteString(`<｜DSML｜invoke name="` + name + `">` + "\n")
			for _, a := range args {
				str := "false"
				if rng.IntN(2) == 0 {
					str = "true"
				}
				b.WriteString(`<｜DSML｜parameter name="` + a.k + `" string="` + str + `">` + a.v + dsmlParamEnd + "\n")
			}
			b.WriteString(dsmlInvokeEnd + "\n" + dsmlBlockEnd)
		}
	}
	return b.String()
}

// TestStreamingMatchesResult cuts random well-formed outputs at random
// points and checks that the streamed deltas assemble into the
// non-streaming result.
func TestStreamingMatchesResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tp := range []string{"", "glm45", "glm47", "deepseek_v32"} {
		for _, rp := range []string{"", "glm45", "deepseek_r1", "deepseek_v3"} {
			for i := range 300 {
				text := randomOutput(rng, tp, rp != "")
				if tp == "" {
					text += safeText(rng, 5)
				}
				o := Options{ToolParser: tp, ReasoningParser: rp, Tools: weatherTools, NewID: counterIDs()}
				p, err := New(o)
				if err != nil {
					t.Fatal(err)
				}
				s := feedInPieces(t, p, text, rng)
				want := p.Result()
				whole, _ := Parse(Options{ToolParser: tp, ReasoningParser: rp, Tools: weatherTools, NewID: counterIDs()}, text)
				if diff := cmp.Diff(whole, want); diff != "" {
					t.Fatalf("%s/%s #%d %q: Result after pieces differs from Parse (-whole +pieces):\n%s", tp, rp, i, text, diff)
				}
				if want.Reasoning != nil && s.reasoning.String() != *want.Reasoning {
					t.Fatalf("%s/%s #%d %q: streamed reasoning %q, result %q", tp, rp, i, text, s.reasoning.String(), *want.Reasoning)
				}
				if want.Content != nil && !strings.HasPrefix(s.content.String(), *want.Content) {
					t.Fatalf("%s/%s #%d %q: streamed content %q does not start with the result's %q", tp, rp, i, text, s.content.String(), *want.Content)
				}
				if diff := cmp.Diff(want.ToolCalls, s.calls); diff != "" {
					t.Fatalf("%s/%s #%d %q: streamed calls (-result +streamed):\n%s", tp, rp, i, text, diff)
				}
			}
		}
	}
}

func TestValues(t *testing.T) {
	reprs := map[float64]string{1: "1.0", 0.1: "0.1", 1e16: "1e+16", 1e15: "1000000000000000.0", 1.5e-5: "1.5e-05", 0.0001: "0.0001", 123456.789: "123456.789", -2.5e100: "-2.5e+100", 5e-324: "5e-324"}
	for f, want := range reprs {
		if got := pyFloatRepr(f); got != want {
			t.Errorf("pyFloatRepr(%g) = %q, want %q", f, got, want)
		}
	}
	literals := []struct{ in, want string }{
		{"'a\\nb'", `"a\nb"`}, {`r'a\nb'`, `"a\\nb"`}, {`"""x"y"""`, `"x\"y"`}, {"1_000", "1000"}, {"-0x10", "-16"},
		{"(1, 2.50)", "[1, 2.5]"}, {"1, 2", "[1, 2]"}, {"{1: 'a', None: True, 2.5: []}", `{"1": "a", "null": true, "2.5": []}`},
		{"[1,\n 2]  # note", "[1, 2]"}, {"'\\x41\\u00e9\\101'", `"AéA"`}, {"u'ok'", `"ok"`},
	}
	for _, c := range literals {
		v, err := pyLiteral(c.in)
		if err != nil {
			t.Errorf("pyLiteral(%q): %v", c.in, err)
			continue
		}
		if got := string(appendJSON(nil, v)); got != c.want {
			t.Errorf("pyLiteral(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{"{1, 2}", "b'x'", "1j", "01", "x", "[1", "1e400", "f'x'", "1 2", "'a\nb'"} {
		if v, err := pyLiteral(bad); err == nil {
			t.Errorf("pyLiteral(%q) = %v, want an error", bad, v)
		}
	}
	jsons := []struct{ in, want string }{
		{`{"a": [1, 2.0, "\u00e9\ud83d\ude00"], "a": true}`, `{"a": true}`}, {"123456789012345678901234567890", "123456789012345678901234567890"},
		{`"tab\tquote\"\u0001"`, `"tab\tquote\"\u0001"`}, {"-0", "0"}, {"1E2", "100.0"},
	}
	for _, c := range jsons {
		v, err := jsonLoads(c.in)
		if err != nil {
			t.Errorf("jsonLoads(%q): %v", c.in, err)
			continue
		}
		if got := string(appendJSON(nil, v)); got != c.want {
			t.Errorf("jsonLoads(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{"[1,]", "{'a': 1}", "\"a\nb\"", "01", "1 2", "tru"} {
		if v, err := jsonLoads(bad); err == nil {
			t.Errorf("jsonLoads(%q) = %v, want an error", bad, v)
		}
	}
}

// FuzzParse feeds arbitrary text in arbitrary pieces to every parser
// combination: no panic, every streamed and every parsed call has valid
// JSON arguments, and Result equals Parse of the whole text.
func FuzzParse(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tp := range []string{"glm45", "glm47", "deepseek_v32"} {
		for range 4 {
			f.Add(randomOutput(rng, tp, true), uint64(rng.Uint32()))
		}
	}
	f.Add("<tool_call>f\n<arg_key>a</arg_key><arg_value>[[[[[[1]]]]]]</arg_value></tool_call>", uint64(7))
	f.Add("<｜DSML｜function_calls><｜DSML｜invoke name=\"a</｜DSML｜invoke>\"><｜DSML｜parameter name=\"x\" string=\"true\">", uint64(9))
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		if len(text) > 1<<14 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		for _, tp := range []string{"", "glm45", "glm47", "deepseek_v32"} {
			rp := []string{"", "glm45", "deepseek_r1"}[seed%3]
			o := Options{ToolParser: tp, ReasoningParser: rp, Tools: weatherTools, NewID: counterIDs()}
			p, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			var calls []ToolCall
			var all strings.Builder
			for rest := text; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(16))
				d := p.Feed(rest[:n])
				rest = rest[n:]
				all.WriteString(d.Reasoning + d.Content)
				for _, tc := range d.ToolCalls {
					if tc.Index == len(calls) {
						calls = append(calls, ToolCall{})
					}
					calls[tc.Index].Arguments += tc.Arguments
				}
			}
			for _, tc := range p.Close().ToolCalls {
				if tc.Index == len(calls) {
					calls = append(calls, ToolCall{})
				}
				calls[tc.Index].Arguments += tc.Arguments
			}
			for i, c := range calls {
				if !json.Valid([]byte(c.Arguments)) {
					t.Fatalf("%s: streamed call %d arguments %q are not valid JSON", tp, i, c.Arguments)
				}
			}
			res := p.Result()
			whole, _ := Parse(Options{ToolParser: tp, ReasoningParser: rp, Tools: weatherTools, NewID: counterIDs()}, text)
			if diff := cmp.Diff(whole, res); diff != "" {
				t.Fatalf("%s: Result after pieces differs from Parse:\n%s", tp, diff)
			}
			for _, c := range res.ToolCalls {
				if !json.Valid([]byte(c.Arguments)) {
					t.Fatalf("%s: parsed arguments %q are not valid JSON", tp, c.Arguments)
				}
			}
			if tp == "" && rp == "" && all.String() != text {
				t.Fatalf("pass-through changed the text: %q → %q", text, all.String())
			}
		}
	})
}
