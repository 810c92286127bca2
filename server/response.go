package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/cpmla/cpmla/chatparse"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/sampler"
)

// minLogprob is the floor of every reported logprob: -inf is not JSON, and
// OpenAI and vLLM write -9999.0 instead.
const minLogprob = -9999.0

func clampLogprob(v float64) float64 { return max(v, minLogprob) }

// choice is one generated sequence of a response.
type choice struct {
	index, prompt int
	text          *textStream
	received      int
	finished      bool
	reason        string
	stopReason    any // a stop string or stop token id, else nil

	parser   *chatparse.Parser // nil unless the job parses chat output
	sawCalls bool              // a tool call was streamed

	out      []byte        // released text
	tokens   []tokenRecord // released tokens
	pending  []tokenRecord // released tokens not yet sent (their text was empty)
	sentRole bool
	echoed   bool
}

// response builds the endpoint's JSON objects for one request.
type response struct {
	s         *Server
	j         *job
	id        string
	created   int64
	out       responder
	choices   []*choice
	promptLPs [][]engine.PromptLogprob // per prompt, when scored
}

func newResponse(s *Server, j *job, id string, created int64, out responder) *response {
	r := &response{s: s, j: j, id: id, created: created, out: out, promptLPs: make([][]engine.PromptLogprob, len(j.prompts))}
	for p := range j.prompts {
		for k := range j.n {
			ts := newTextStream(s.cfg.Tokenizer, j.stops, j.keepsSpecial())
			c := &choice{index: p*j.n + k, prompt: p}
			if j.parses() {
				c.parser, _ = chatparse.New(j.parsing) // the options were checked when parsing the request
			}
			ts.includeStop, ts.minTokens = j.includeStop, j.params.MinTokens
			c.text = ts
			r.choices = append(r.choices, c)
		}
	}
	return r
}

// responder writes either one JSON body or a stream of events.
type responder interface {
	// event writes one streamed chunk (never called for whole responses).
	event(v any) error
	// whole writes the complete response.
	whole(v any) error
	// done ends a stream.
	done() error
	// fail reports an error: as the status and body when nothing has been
	// written yet, as an error event inside a started stream.
	fail(e *apiError)
}

func (r *response) delta(c *choice, piece string, toks []tokenRecord) error {
	c.out = append(c.out, piece...)
	c.tokens = append(c.tokens, toks...)
	var d chatparse.Delta
	if c.parser != nil {
		d = r.trimCalls(c.parser.Feed(piece))
	}
	if !r.j.stream {
		return nil
	}
	c.pending = append(c.pending, toks...)
	if c.parser != nil {
		if d.Empty() {
			return nil
		}
		err := r.out.event(r.chatChunk(c, d, c.pending, nil))
		c.pending = c.pending[:0]
		return err
	}
	if piece == "" && !(r.j.echo && !c.echoed) {
		return nil
	}
	err := r.out.event(r.chunk(c, piece, c.pending, nil))
	c.pending = c.pending[:0]
	return err
}

// trimCalls drops the calls after the first with parallel_tool_calls false.
func (r *response) trimCalls(d chatparse.Delta) chatparse.Delta {
	if r.j.singleToolCall {
		d.ToolCalls = slices.DeleteFunc(d.ToolCalls, func(c chatparse.ToolCallDelta) bool { return c.Index > 0 })
	}
	return d
}

// finishChoice records c's last text and reason; the response is written
// (whole) or ended (stream) once the last choice has finished.
func (r *response) finishChoice(c *choice, piece string, toks []tokenRecord, reason string, last bool) error {
	c.out = append(c.out, piece...)
	c.tokens = append(c.tokens, toks...)
	c.reason = reason
	var d chatparse.Delta
	if c.parser != nil {
		d = r.trimCalls(c.parser.Feed(piece))
		rest := r.trimCalls(c.parser.Close())
		d.Reasoning += rest.Reasoning
		d.Content += rest.Content
		d.ToolCalls = append(d.ToolCalls, rest.ToolCalls...)
		if len(c.parser.Result().ToolCalls) > 0 {
			c.reason = "tool_calls"
		}
	}
	if !r.j.stream {
		if !last {
			return nil
		}
		return r.out.whole(r.wholeBody())
	}
	c.pending = append(c.pending, toks...)
	var ev any
	if c.parser != nil {
		ev = r.chatChunk(c, d, c.pending, &c.reason)
	} else {
		ev = r.chunk(c, piece, c.pending, &reason)
	}
	if err := r.out.event(ev); err != nil {
		return err
	}
	c.pending = c.pending[:0]
	if !last {
		return nil
	}
	if r.j.includeUsage {
		u := r.usage()
		if err := r.out.event(r.usageChunk(&u)); err != nil {
			return err
		}
	}
	return r.out.done()
}

func (r *response) usage() Usage {
	var u Usage
	for _, pj := range r.j.prompts {
		u.PromptTokens += len(pj.ids)
	}
	for _, c := range r.choices {
		u.CompletionTokens += c.received
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func (r *response) usageChunk(u *Usage) any {
	if r.j.chat {
		return ChatChunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.s.cfg.ModelName, Choices: []ChatChunkChoice{}, Usage: u}
	}
	return CompletionResponse{ID: r.id, Object: "text_completion", Created: r.created, Model: r.s.cfg.ModelName, Choices: []CompletionChoice{}, Usage: u}
}

// chunk is one streamed event of choice c.
func (r *response) chunk(c *choice, piece string, toks []tokenRecord, reason *string) any {
	var usage *Usage
	if r.j.continuousUsage {
		u := r.usage()
		usage = &u
	}
	var stop any
	if reason != nil {
		stop = c.stopReason
	}
	if r.j.chat {
		return r.chatChunk(c, chatparse.Delta{Content: piece}, toks, reason)
	}
	echo := ""
	var lp *CompletionLogprobs
	if r.j.echo && !c.echoed {
		c.echoed = true
		echo = r.j.prompts[c.prompt].text
		lp = r.echoLogprobs(c.prompt)
	}
	shift := 0
	if r.j.echo {
		shift = len(r.j.prompts[c.prompt].text)
	}
	gen := r.completionLogprobs(toks, shift)
	lp = joinLogprobs(lp, gen)
	return CompletionResponse{ID: r.id, Object: "text_completion", Created: r.created, Model: r.s.cfg.ModelName, Usage: usage,
		Choices: []CompletionChoice{{Index: c.index, Text: echo + piece, Logprobs: lp, FinishReason: reason, StopReason: stop}}}
}

// chatChunk is one streamed chat event of choice c carrying d.
func (r *response) chatChunk(c *choice, d chatparse.Delta, toks []tokenRecord, reason *string) any {
	var usage *Usage
	if r.j.continuousUsage {
		u := r.usage()
		usage = &u
	}
	ch := ChatChunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.s.cfg.ModelName, Usage: usage}
	delta := ChatDelta{Content: d.Content, ReasoningContent: d.Reasoning}
	for _, tc := range d.ToolCalls {
		out := ChatToolCallDelta{Index: tc.Index, ID: tc.ID, Function: ChatFunctionDelta{Name: tc.Name, Arguments: tc.Arguments}}
		if tc.ID != "" {
			out.Type = "function"
		}
		delta.ToolCalls = append(delta.ToolCalls, out)
		c.sawCalls = true
	}
	if !c.sentRole {
		delta.Role, c.sentRole = "assistant", true
	}
	ch.Choices = []ChatChunkChoice{{Index: c.index, Delta: delta, Logprobs: r.chatLogprobs(toks), FinishReason: reason}}
	return ch
}

// chatMessage is the whole message of choice c.
func (r *response) chatMessage(c *choice) ChatOutput {
	if c.parser == nil {
		text := string(c.out)
		return ChatOutput{Role: "assistant", Content: &text}
	}
	m := c.parser.Result()
	out := ChatOutput{Role: "assistant", Content: m.Content, ReasoningContent: m.Reasoning}
	for i, tc := range m.ToolCalls {
		if i > 0 && r.j.singleToolCall {
			break
		}
		out.ToolCalls = append(out.ToolCalls, ChatToolCall{ID: tc.ID, Type: "function", Function: ChatFunction{Name: tc.Name, Arguments: tc.Arguments}})
	}
	return out
}

func (r *response) wholeBody() any {
	u := r.usage()
	if r.j.chat {
		resp := ChatResponse{ID: r.id, Object: "chat.completion", Created: r.created, Model: r.s.cfg.ModelName, Usage: &u,
			PromptLogprobs: r.promptLogprobs(0)}
		for _, c := range r.choices {
			resp.Choices = append(resp.Choices, ChatChoice{Index: c.index, Message: r.chatMessage(c),
				Logprobs: r.chatLogprobs(c.tokens), FinishReason: c.reason, StopReason: c.stopReason})
		}
		return resp
	}
	resp := CompletionResponse{ID: r.id, Object: "text_completion", Created: r.created, Model: r.s.cfg.ModelName, Usage: &u}
	for _, c := range r.choices {
		text := string(c.out)
		var lp *CompletionLogprobs
		offset := 0
		if r.j.echo {
			text = r.j.prompts[c.prompt].text + text
			lp = r.echoLogprobs(c.prompt)
			offset = len(r.j.prompts[c.prompt].text)
		}
		lp = joinLogprobs(lp, r.completionLogprobs(c.tokens, offset))
		reason := c.reason
		resp.Choices = append(resp.Choices, CompletionChoice{Index: c.index, Text: text, Logprobs: lp, FinishReason: &reason,
			StopReason: c.stopReason, PromptLogprobs: r.promptLogprobs(c.prompt)})
	}
	return resp
}

// tokenString is a token as logprobs name it: its text, or "token_id:N"
// with return_tokens_as_token_ids.
func (r *response) tokenString(id int) string {
	if r.j.asTokenIDs {
		return "token_id:" + strconv.Itoa(id)
	}
	return r.s.cfg.Tokenizer.Decode([]int{id}, false)
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

func (r *response) chatLogprobs(toks []tokenRecord) *ChatLogprobs {
	if !r.j.logprobs {
		return nil
	}
	lp := &ChatLogprobs{Content: make([]ChatTokenLogprob, len(toks))}
	for i, t := range toks {
		s := r.tokenString(t.id)
		top := make([]ChatTopLogprob, len(t.top))
		for k, a := range t.top {
			ts := r.tokenString(int(a.Token))
			top[k] = ChatTopLogprob{Token: ts, Logprob: clampLogprob(a.Logprob), Bytes: tokenBytes(ts)}
		}
		lp.Content[i] = ChatTokenLogprob{Token: s, Logprob: clampLogprob(t.logprob), Bytes: tokenBytes(s), TopLogprobs: top}
	}
	return lp
}

// completionLogprobs are the generated tokens' logprobs; text_offset is a
// token's byte position in the choice's text, which starts with offset
// bytes of echoed prompt.
func (r *response) completionLogprobs(toks []tokenRecord, offset int) *CompletionLogprobs {
	if !r.j.logprobs {
		return nil
	}
	lp := &CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, t := range toks {
		v := clampLogprob(t.logprob)
		lp.Tokens = append(lp.Tokens, r.tokenString(t.id))
		lp.TokenLogprobs = append(lp.TokenLogprobs, &v)
		lp.TopLogprobs = append(lp.TopLogprobs, r.topDict(t.id, t.logprob, t.top))
		lp.TextOffset = append(lp.TextOffset, offset+t.offset)
	}
	return lp
}

// topDict is a completion step's top_logprobs: the chosen token and the
// most likely ones, by token text (OpenAI's completions shape, which
// lm-eval reads with max(top_logprobs[t].values())).
func (r *response) topDict(id int, logprob float64, top []sampler.TokenLogprob) map[string]float64 {
	d := make(map[string]float64, len(top)+1)
	d[r.tokenString(id)] = clampLogprob(logprob)
	for _, a := range top {
		d[r.tokenString(int(a.Token))] = clampLogprob(a.Logprob)
	}
	return d
}

// echoLogprobs are an echoed prompt's tokens with their logprobs (null at
// the first token), or nil without logprobs.
func (r *response) echoLogprobs(p int) *CompletionLogprobs {
	if !r.j.logprobs {
		return nil
	}
	ids, scores := r.j.prompts[p].ids, r.promptLPs[p]
	lp := &CompletionLogprobs{}
	off := 0
	for i, id := range ids {
		s := r.tokenString(id)
		lp.Tokens = append(lp.Tokens, s)
		lp.TextOffset = append(lp.TextOffset, off)
		off += len(r.s.cfg.Tokenizer.Decode([]int{id}, false))
		if i == 0 || i >= len(scores) {
			lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
			lp.TopLogprobs = append(lp.TopLogprobs, nil)
			continue
		}
		v := clampLogprob(scores[i].Logprob)
		lp.TokenLogprobs = append(lp.TokenLogprobs, &v)
		lp.TopLogprobs = append(lp.TopLogprobs, r.topDict(id, scores[i].Logprob, scores[i].Top))
	}
	return lp
}

// joinLogprobs appends b's entries to a's (either may be nil).
func joinLogprobs(a, b *CompletionLogprobs) *CompletionLogprobs {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	a.Tokens = append(a.Tokens, b.Tokens...)
	a.TokenLogprobs = append(a.TokenLogprobs, b.TokenLogprobs...)
	a.TopLogprobs = append(a.TopLogprobs, b.TopLogprobs...)
	a.TextOffset = append(a.TextOffset, b.TextOffset...)
	return a
}

// promptLogprobs is vLLM's prompt_logprobs of prompt p: null at position 0,
// then per position the prompt token and the most likely tokens by id.
func (r *response) promptLogprobs(p int) []map[string]PromptLogprob {
	if r.j.promptLogprobs < 0 || p >= len(r.promptLPs) || r.promptLPs[p] == nil {
		return nil
	}
	ids, scores := r.j.prompts[p].ids, r.promptLPs[p]
	out := make([]map[string]PromptLogprob, len(ids))
	for i := 1; i < len(ids) && i < len(scores); i++ {
		sc := scores[i]
		m := make(map[string]PromptLogprob, len(sc.Top)+1)
		m[strconv.Itoa(ids[i])] = PromptLogprob{Logprob: clampLogprob(sc.Logprob), Rank: sc.Rank, DecodedToken: r.tokenString(ids[i])}
		for k, a := range sc.Top {
			key := strconv.Itoa(int(a.Token))
			if _, ok := m[key]; !ok {
				m[key] = PromptLogprob{Logprob: clampLogprob(a.Logprob), Rank: k + 1, DecodedToken: r.tokenString(int(a.Token))}
			}
		}
		out[i] = m
	}
	return out
}

// wholeResponder writes one JSON body.
type wholeResponder struct {
	w       http.ResponseWriter
	written bool
}

func (o *wholeResponder) event(any) error { return errors.New("event on a non-streamed response") }

func (o *wholeResponder) whole(v any) error {
	o.written = true
	writeJSON(o.w, http.StatusOK, v)
	return nil
}

func (o *wholeResponder) done() error { return nil }

func (o *wholeResponder) fail(e *apiError) {
	if !o.written {
		o.written = true
		writeError(o.w, e)
	}
}

// streamResponder writes server-sent events, flushing each one. The
// headers go out with the first event, so an engine failure before any
// token still gets a proper status code.
type streamResponder struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool
	ended   bool
}

func (o *streamResponder) start() {
	if o.started {
		return
	}
	o.started = true
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	o.w.WriteHeader(http.StatusOK)
}

func (o *streamResponder) write(data []byte) error {
	o.start()
	// A client that stops reading must not hold the request forever; the
	// deadline is cleared again when the stream ends (connections are
	// reused).
	if err := o.rc.SetWriteDeadline(time.Now().Add(o.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("set write deadline: %w", err)
	}
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := o.w.Write(buf); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	if err := o.rc.Flush(); err != nil {
		return fmt.Errorf("flush event: %w", err)
	}
	return nil
}

func (o *streamResponder) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return o.write(b)
}

func (o *streamResponder) whole(any) error { return errors.New("whole response on a stream") }

func (o *streamResponder) done() error {
	err := o.write([]byte("[DONE]"))
	o.end()
	return err
}

func (o *streamResponder) end() {
	if !o.ended {
		o.ended = true
		_ = o.rc.SetWriteDeadline(time.Time{})
	}
}

func (o *streamResponder) fail(e *apiError) {
	if !o.started {
		writeError(o.w, e)
		return
	}
	if b, err := json.Marshal(e.body()); err == nil {
		_ = o.write(b)
	}
	_ = o.write([]byte("[DONE]"))
	o.end()
}
