package chatparse

import (
	"strings"
	"testing"
)

// BenchmarkFeed streams outputs three bytes at a time, including inputs
// built to defeat a parser that rescans: a value that never ends, keys
// that never get a value, a run of partial tags. ns/op grows linearly with
// the size (compare the /1x and /4x cases).
func BenchmarkFeed(b *testing.B) {
	inputs := []struct{ name, tp, unit string }{
		{"glm-long-value", "glm47", "x<"},
		{"glm-keys-without-values", "glm45", "<arg_key>a</arg_key> "},
		{"dsml-long-value", "deepseek_v32", "y<"},
		{"partial-think-tags", "glm47", "<thi "},
	}
	prefix := map[string]string{
		"glm47":        "<tool_call>search\n<arg_key>query</arg_key><arg_value>",
		"glm45":        "<tool_call>search\n",
		"deepseek_v32": "<｜DSML｜function_calls><｜DSML｜invoke name=\"search\"><｜DSML｜parameter name=\"query\" string=\"true\">",
	}
	for _, in := range inputs {
		for _, scale := range []int{1, 4} {
			text := prefix[in.tp] + strings.Repeat(in.unit, 5000*scale)
			if in.name == "partial-think-tags" {
				text = strings.Repeat(in.unit, 5000*scale)
			}
			b.Run(in.name+"/"+map[int]string{1: "1x", 4: "4x"}[scale], func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					p, err := New(Options{ToolParser: in.tp, ReasoningParser: "glm45", Tools: weatherTools})
					if err != nil {
						b.Fatal(err)
					}
					for i := 0; i < len(text); i += 3 {
						p.Feed(text[i:min(len(text), i+3)])
					}
					p.Close()
					p.Result()
				}
			})
		}
	}
}
