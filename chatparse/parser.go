package chatparse

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Names of the parsers, as vLLM's --tool-call-parser and --reasoning-parser
// spell them.
const (
	ToolParserGLM45       = "glm45"
	ToolParserGLM47       = "glm47"
	ToolParserDeepSeekV32 = "deepseek_v32"

	ReasoningParserGLM45      = "glm45"
	ReasoningParserDeepSeekR1 = "deepseek_r1"
	ReasoningParserDeepSeekV3 = "deepseek_v3"
)

var (
	toolParsers      = map[string]bool{ToolParserGLM45: true, ToolParserGLM47: true, ToolParserDeepSeekV32: true}
	reasoningParsers = map[string]bool{ReasoningParserGLM45: true, ReasoningParserDeepSeekR1: true, ReasoningParserDeepSeekV3: true}
)

// ToolParsers lists the tool-call parser names New accepts.
func ToolParsers() []string { return slices.Sorted(maps.Keys(toolParsers)) }

// ReasoningParsers lists the reasoning parser names New accepts.
func ReasoningParsers() []string { return slices.Sorted(maps.Keys(reasoningParsers)) }

// CheckToolParser returns an error naming the supported parsers when name
// is not one of them ("" means none and is accepted).
func CheckToolParser(name string) error {
	if name != "" && !toolParsers[name] {
		return fmt.Errorf("tool-call parser %q is not supported; use one of %s", name, strings.Join(ToolParsers(), ", "))
	}
	return nil
}

// CheckReasoningParser is CheckToolParser for reasoning parsers.
func CheckReasoningParser(name string) error {
	if name != "" && !reasoningParsers[name] {
		return fmt.Errorf("reasoning parser %q is not supported; use one of %s", name, strings.Join(ReasoningParsers(), ", "))
	}
	return nil
}

// Options configure one Parser, i.e. one generated choice.
type Options struct {
	// ToolParser is "", "glm45", "glm47" or "deepseek_v32". The server sets
	// it only when tool calls are to be parsed for this request (auto tool
	// choice is enabled, the request has tools and tool_choice is not
	// "none"); "" passes the text through as content.
	ToolParser string
	// ReasoningParser is "", "glm45", "deepseek_r1" or "deepseek_v3".
	ReasoningParser string
	// Tools are the request's tools; their schemas type the arguments.
	Tools []Tool
	// ChatTemplateKwargs are the request's chat_template_kwargs. For the
	// glm45 reasoning parser, "enable_thinking" or "thinking" set to false
	// means the model does not reason and everything is content; for
	// deepseek_v3 the model reasons only when one of them is true.
	ChatTemplateKwargs map[string]any
	// NewID makes tool call ids; nil means "chatcmpl-tool-" followed by 32
	// random hex digits.
	NewID func() string
}

// Delta is what one Feed or Close adds to the message.
type Delta struct {
	Reasoning string
	Content   string
	ToolCalls []ToolCallDelta
}

// Empty reports whether the delta carries nothing.
func (d Delta) Empty() bool { return d.Reasoning == "" && d.Content == "" && len(d.ToolCalls) == 0 }

// ToolCallDelta is a piece of one tool call. The first delta of a call
// carries its ID and Name (and Arguments ""); later ones carry fragments of
// the arguments JSON text. Concatenated, a call's fragments are its
// arguments.
type ToolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Message is the parsed output of a whole generation, as vLLM's
// non-streaming response reports it.
type Message struct {
	// Reasoning is nil without a reasoning parser (or with thinking
	// disabled).
	Reasoning *string
	// Content is nil when there is none: empty after the reasoning, or
	// empty or only whitespace before the first GLM tool call.
	Content   *string
	ToolCalls []ToolCall
}

// ToolCall is one parsed call; Arguments is a JSON object text, written as
// Python's json.dumps(ensure_ascii=False) writes it.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Parser splits one generated text, delivered in pieces, into reasoning,
// content and tool calls. It is not safe for concurrent use.
type Parser struct {
	opts      Options
	reasoning *reasoningSplitter // nil without a reasoning parser
	tools     toolStream         // nil without a tool parser

	reasoningText strings.Builder
	contentText   strings.Builder
	ids           []string
	closed        bool
}

// toolStream is one tool-call parser's streaming state.
type toolStream interface {
	// feed consumes content text; final means no more text follows.
	feed(text string, final bool, d *Delta)
	// parse is the non-streaming extraction from the whole content text.
	parse(text string) (content *string, calls []ToolCall)
}

// New returns a parser for one generated choice.
func New(o Options) (*Parser, error) {
	if err := CheckToolParser(o.ToolParser); err != nil {
		return nil, err
	}
	if err := CheckReasoningParser(o.ReasoningParser); err != nil {
		return nil, err
	}
	p := &Parser{opts: o}
	if p.opts.NewID == nil {
		p.opts.NewID = randomToolCallID
	}
	switch o.ReasoningParser {
	case ReasoningParserDeepSeekR1:
		p.reasoning = &reasoningSplitter{inReasoning: true}
	case ReasoningParserGLM45:
		p.reasoning = &reasoningSplitter{inReasoning: thinkingEnabled(o.ChatTemplateKwargs)}
	case ReasoningParserDeepSeekV3:
		// DeepSeek-V3.1/V3.2 think only when asked to.
		kw := o.ChatTemplateKwargs
		p.reasoning = &reasoningSplitter{inReasoning: truthy(kw["thinking"]) || truthy(kw["enable_thinking"])}
	}
	if o.ToolParser != "" {
		schemas, err := buildSchemas(o.Tools)
		if err != nil {
			return nil, err
		}
		switch o.ToolParser {
		case ToolParserGLM45, ToolParserGLM47:
			p.tools = &glmStream{
				glm47: o.ToolParser == ToolParserGLM47, schemas: schemas, id: p.id,
				regions: regionScanner{start: glmCallStart, end: glmCallEnd},
			}
		case ToolParserDeepSeekV32:
			p.tools = &dsmlStream{
				schemas: schemas, id: p.id,
				regions: regionScanner{start: dsmlBlockStart, end: dsmlBlockEnd},
			}
		}
	}
	return p, nil
}

// thinkingEnabled follows vLLM's GLM reasoning parser: with neither
// "thinking" nor "enable_thinking" set (or both null) the model thinks;
// otherwise it thinks when either is true (Python truthiness).
func thinkingEnabled(kw map[string]any) bool {
	t, e := kw["thinking"], kw["enable_thinking"]
	if t == nil && e == nil {
		return true
	}
	return truthy(t) || truthy(e)
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case int:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

func randomToolCallID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "chatcmpl-tool-" + hex.EncodeToString(b[:])
}

// id returns the id of the i-th tool call, making it on first use, so the
// streamed calls and Result's calls share ids.
func (p *Parser) id(i int) string {
	for len(p.ids) <= i {
		p.ids = append(p.ids, p.opts.NewID())
	}
	return p.ids[i]
}

// Feed consumes the next piece of generated text (as detokenized with the
// special tokens kept) and returns what can be released now. Text that
// could be the start of a tag is held back until the next piece decides.
func (p *Parser) Feed(text string) Delta {
	if p.closed {
		panic("chatparse: Feed after Close")
	}
	return p.step(text, false)
}

// Close ends the text and returns what was held back. A tool call still
// open at the end is closed so that its streamed arguments are valid JSON.
func (p *Parser) Close() Delta {
	if p.closed {
		return Delta{}
	}
	d := p.step("", true)
	p.closed = true
	return d
}

func (p *Parser) step(text string, final bool) Delta {
	var d Delta
	content := text
	if p.reasoning != nil {
		var reasoning string
		reasoning, content = p.reasoning.feed(text, final)
		d.Reasoning = reasoning
		p.reasoningText.WriteString(reasoning)
	}
	p.contentText.WriteString(content)
	if p.tools == nil {
		d.Content = content
		return d
	}
	p.tools.feed(content, final, &d)
	return d
}

// Result returns the parsed message of everything fed so far, as a
// non-streaming response reports it. Call it after Close.
func (p *Parser) Result() Message {
	var m Message
	content := p.contentText.String()
	if p.reasoning != nil && !p.reasoning.identity() {
		r := p.reasoningText.String()
		m.Reasoning = &r
	}
	if p.tools != nil {
		m.Content, m.ToolCalls = p.tools.parse(content)
		return m
	}
	if p.reasoning != nil && !p.reasoning.identity() && content == "" {
		return m
	}
	m.Content = &content
	return m
}

// Parse is the non-streaming use: the whole text at once.
func Parse(o Options, text string) (Message, error) {
	p, err := New(o)
	if err != nil {
		return Message{}, err
	}
	p.Feed(text)
	p.Close()
	return p.Result(), nil
}

// overlap returns the length of the longest proper prefix of tag that s
// ends with: the part of s that may still become tag.
func overlap(s, tag string) int {
	for k := min(len(tag)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, tag[:k]) {
			return k
		}
	}
	return 0
}

// reasoningSplitter is the <think>…</think> split of the deepseek_r1 and
// glm45 reasoning parsers: the text is reasoning from the start (templates
// often open <think> in the prompt) until the first </think>, and content
// after it; one <think> before that point is dropped.
type reasoningSplitter struct {
	inReasoning  bool
	sawReasoning bool // inReasoning was true at the start
	startDropped bool
	buf          string
	started      bool
}

const (
	thinkStart = "<think>"
	thinkEnd   = "</think>"
)

func (r *reasoningSplitter) identity() bool {
	if !r.started {
		return !r.inReasoning
	}
	return !r.sawReasoning
}

func (r *reasoningSplitter) feed(text string, final bool) (reasoning, content string) {
	if !r.started {
		r.started, r.sawReasoning = true, r.inReasoning
	}
	if !r.inReasoning {
		return "", text
	}
	buf := r.buf + text
	var out strings.Builder
	for r.inReasoning {
		end := strings.Index(buf, thinkEnd)
		if !r.startDropped {
			if start := strings.Index(buf, thinkStart); start >= 0 && (end < 0 || start < end) {
				out.WriteString(buf[:start])
				buf = buf[start+len(thinkStart):]
				r.startDropped = true
				continue
			}
		}
		if end >= 0 {
			out.WriteString(buf[:end])
			r.inReasoning = false
			r.buf = ""
			return out.String(), buf[end+len(thinkEnd):]
		}
		hold := overlap(buf, thinkEnd)
		if !r.startDropped {
			hold = max(hold, overlap(buf, thinkStart))
		}
		if final {
			hold = 0
		}
		out.WriteString(buf[:len(buf)-hold])
		r.buf = buf[len(buf)-hold:]
		break
	}
	return out.String(), ""
}
