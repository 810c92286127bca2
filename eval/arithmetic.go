package eval

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem is one arithmetic word problem with its integer answer.
type Problem struct {
	Question string `json:"question"`
	Answer   int    `json:"answer"`
}

// heldoutJSONL holds the held-out problems of cpmla-tiny's arithmetic task
// (one- and two-step word problems on two-digit numbers), drawn from their
// own seed: no training problem has the same numbers and operations.
//
//go:embed data/arithmetic_heldout.jsonl
var heldoutJSONL []byte

// HeldoutProblems returns the 500 held-out arithmetic problems in their
// fixed order.
func HeldoutProblems() ([]Problem, error) {
	return ParseProblems(heldoutJSONL)
}

// Bounds of a problem file: one JSON object a line, at most MaxProblems
// lines of at most MaxProblemBytes.
const (
	MaxProblems     = 1 << 16
	MaxProblemBytes = 4 << 10
)

// ParseProblems reads JSON lines of {"question": string, "answer": int}
// (other keys are refused by name, as is a line without both), refusing
// more than MaxProblems lines or a line over MaxProblemBytes.
func ParseProblems(data []byte) ([]Problem, error) {
	var out []Problem
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxProblemBytes)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if len(out) == MaxProblems {
			return nil, fmt.Errorf("problems: more than %d problems", MaxProblems)
		}
		var raw struct {
			Question *string `json:"question"`
			Answer   *int    `json:"answer"`
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("problems line %d: %w (want {\"question\": string, \"answer\": integer})", n, err)
		}
		if raw.Question == nil || raw.Answer == nil || *raw.Question == "" {
			return nil, fmt.Errorf("problems line %d: want a non-empty \"question\" and an integer \"answer\"", n)
		}
		out = append(out, Problem{Question: *raw.Question, Answer: *raw.Answer})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("problems: %w (a line may have at most %d bytes)", err, MaxProblemBytes)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("problems: no problem")
	}
	return out, nil
}

// GSM8KPrompt is lm-eval gsm8k's doc_to_text: "Question: {question}\nAnswer:".
func GSM8KPrompt(question string) string { return "Question: " + question + "\nAnswer:" }

// GSM8KUntil is lm-eval gsm8k's generation_kwargs until (task version 3);
// lm-eval's API models add the tokenizer's eos text to it.
var GSM8KUntil = []string{"Question:", "</s>", "<|im_end|>"}

// GSM8KMaxGenToks is lm-eval's default max_gen_toks, the max_tokens of a
// generate_until request.
const GSM8KMaxGenToks = 256

// gsm8k's filters and exact_match settings (task version 3).
var (
	strictRegex   = regexp.MustCompile(`#### (\-?[0-9\.\,]+)`)
	flexibleRegex = regexp.MustCompile(`(-?[$0-9.,]{2,})|(-?[0-9]+)`)
	// regexes_to_ignore, applied to prediction and reference alike. Python's
	// "\.$" also matches before a final newline, which \.(\n?)\z keeps.
	ignoreRegexes = []struct {
		re   *regexp.Regexp
		repl string
	}{
		{regexp.MustCompile(`,`), ""},
		{regexp.MustCompile(`\$`), ""},
		{regexp.MustCompile(`(?s).*#### `), ""},
		{regexp.MustCompile(`\.(\n?)\z`), "$1"},
	}
)

// invalidAnswer is what lm-eval's regex filter returns without a match.
const invalidAnswer = "[invalid]"

// StrictMatch is gsm8k's "strict-match" filter: the number after the first
// "#### ", or "[invalid]".
func StrictMatch(response string) string {
	m := strictRegex.FindStringSubmatch(response)
	if m == nil {
		return invalidAnswer
	}
	return strings.TrimSpace(m[1])
}

// FlexibleExtract is gsm8k's "flexible-extract" filter: the last number of
// the response (group_select -1, the first group that matched), or
// "[invalid]".
func FlexibleExtract(response string) string {
	all := flexibleRegex.FindAllStringSubmatch(response, -1)
	if len(all) == 0 {
		return invalidAnswer
	}
	last := all[len(all)-1]
	for _, g := range last[1:] {
		if g != "" {
			return strings.TrimSpace(g)
		}
	}
	return invalidAnswer
}

// ExactMatch is gsm8k's exact_match with ignore_case and its
// regexes_to_ignore applied to both sides.
func ExactMatch(prediction, reference string) bool {
	norm := func(s string) string {
		for _, r := range ignoreRegexes {
			s = r.re.ReplaceAllString(s, r.repl)
		}
		return strings.ToLower(s)
	}
	return norm(prediction) == norm(reference)
}

// ArithmeticOptions are the settings of the arithmetic task's requests.
type ArithmeticOptions struct {
	Model       string
	MaxGenToks  int    // max_tokens (lm-eval's max_gen_toks)
	EOS         string // the tokenizer's eos text, added to the stop list as lm-eval does ("" adds none)
	Concurrency int
}

// ArithmeticResult is one problem's outcome.
type ArithmeticResult struct {
	Reply
	Strict   string `json:"strict_match"`
	Flexible string `json:"flexible_extract"`
	// StrictOK and FlexibleOK: the filtered answer matches the reference.
	StrictOK   bool `json:"strict_ok"`
	FlexibleOK bool `json:"flexible_ok"`
}

// ScoreArithmetic scores one reply to problem p with both filters.
func ScoreArithmetic(p Problem, r Reply) ArithmeticResult {
	out := ArithmeticResult{Reply: r, Strict: invalidAnswer, Flexible: invalidAnswer}
	if !r.OK {
		return out
	}
	ref := strconv.Itoa(p.Answer)
	out.Strict, out.Flexible = StrictMatch(r.Text), FlexibleExtract(r.Text)
	out.StrictOK, out.FlexibleOK = ExactMatch(out.Strict, ref), ExactMatch(out.Flexible, ref)
	return out
}

// RunArithmetic sends every problem to baseURL's /v1/completions as lm-eval's
// gsm8k task does zero-shot (prompt GSM8KPrompt, temperature 0, stop
// GSM8KUntil plus the eos text, max_tokens MaxGenToks, seed 1234) and scores
// the replies, in problem order.
func RunArithmetic(ctx context.Context, client *http.Client, baseURL string, problems []Problem, o ArithmeticOptions) ([]ArithmeticResult, error) {
	if o.MaxGenToks < 1 {
		return nil, fmt.Errorf("arithmetic: max_gen_toks %d must be at least 1 (lm-eval's default is %d)", o.MaxGenToks, GSM8KMaxGenToks)
	}
	if !utf8.ValidString(o.EOS) {
		return nil, fmt.Errorf("arithmetic: the eos text %q is not UTF-8", o.EOS)
	}
	stop := append([]string(nil), GSM8KUntil...)
	if o.EOS != "" && !slices.Contains(stop, o.EOS) {
		stop = append(stop, o.EOS)
	}
	out := make([]ArithmeticResult, len(problems))
	forEach(len(problems), o.Concurrency, func(i int) {
		r := completeText(ctx, client, baseURL, textRequest{Model: o.Model, Prompt: GSM8KPrompt(problems[i].Question),
			MaxTokens: o.MaxGenToks, Temperature: 0, Stop: stop, Seed: Seed})
		out[i] = ScoreArithmetic(problems[i], r)
	})
	return out, nil
}
