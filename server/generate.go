package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cpmla/cpmla/engine"
)

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req ChatRequest
	if e := decodeBody(w, r, &req); e != nil {
		s.reject(w, e)
		return
	}
	j, e := s.parseChat(&req)
	if e != nil {
		s.reject(w, e)
		return
	}
	s.generate(w, r, j, arrival)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req CompletionRequest
	if e := decodeBody(w, r, &req); e != nil {
		s.reject(w, e)
		return
	}
	j, e := s.parseCompletion(&req)
	if e != nil {
		s.reject(w, e)
		return
	}
	s.generate(w, r, j, arrival)
}

// reject answers a request that never reaches the engine.
func (s *Server) reject(w http.ResponseWriter, e *apiError) {
	s.metrics.rejected.WithLabelValues(fmt.Sprint(e.status)).Inc()
	writeError(w, e)
}

// generate admits j, runs it on the engine and writes the response. The
// engine request's context ends when generate returns.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, j *job, arrival time.Time) {
	if !s.admit() {
		s.reject(w, &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "server_overloaded",
			msg: fmt.Sprintf("the server already has %d requests in flight, its limit (the engine's running slots plus --max-queue); retry later or start the server with a larger --max-queue", cap(s.slots))})
		return
	}
	defer s.release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	id := newID(prefix)
	timer := s.metrics.admit(arrival, len(j.promptIDs))
	events, err := s.cfg.Engine.Submit(ctx, engine.Request{
		ID: id, PromptIDs: j.promptIDs, MaxTokens: j.maxTokens, Sampling: j.params,
		StopTokenIDs: s.cfg.StopTokenIDs, IgnoreEOS: j.ignoreEOS,
	})
	if err != nil {
		timer.end(time.Now(), "")
		s.cfg.Logger.Warn("engine refused request", "id", id, "err", err)
		if errors.Is(err, engine.ErrOverloaded) {
			s.reject(w, &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "server_overloaded",
				msg: fmt.Sprintf("the engine's queue is full (%v); retry later or start the server with a larger --max-queue", err)})
			return
		}
		writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "server_error",
			msg: fmt.Sprintf("the engine did not accept the request: %v", err)})
		return
	}

	var out responder
	if j.stream {
		out = &streamResponder{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	} else {
		out = &wholeResponder{w: w}
	}
	resp := &response{s: s, j: j, id: id, created: arrival.Unix(), out: out}
	reason, err := s.follow(ctx, j, events, timer, resp)
	now := time.Now()
	switch {
	case err != nil && ctx.Err() != nil && r.Context().Err() != nil:
		// The client is gone: nothing to write to.
		timer.end(now, engine.FinishAbort)
	case err != nil:
		timer.end(now, engine.FinishAbort)
		s.cfg.Logger.Warn("request failed", "id", id, "err", err)
		out.fail(&apiError{status: http.StatusInternalServerError, typ: "server_error", msg: err.Error()})
	default:
		timer.end(now, reason)
	}
}

// follow reads the engine's events for j until the request finishes, a
// stop string ends it, the client goes away or a write fails.
func (s *Server) follow(ctx context.Context, j *job, events <-chan engine.Event, timer *requestTimer, resp *response) (string, error) {
	text := newTextStream(s.cfg.Tokenizer, j.stops)
	received := 0
	for {
		var ev engine.Event
		var ok bool
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("request cancelled: %w", context.Cause(ctx))
		case ev, ok = <-events:
		}
		if !ok {
			return "", errors.New("the engine closed the request's stream without a finish reason")
		}
		if ev.Err != nil {
			return "", fmt.Errorf("engine: %w", ev.Err)
		}
		// The last event carries a token too when the engine counts one
		// more output token than have arrived.
		var piece string
		var toks []tokenRecord
		stopped := false
		if ev.Finish == "" || ev.OutputTokens > received {
			received++
			timer.token(time.Now())
			piece, toks, stopped = text.add(ev.Token, ev.Logprob)
		}
		usage := Usage{PromptTokens: len(j.promptIDs), CompletionTokens: received}
		if ev.Finish != "" && ev.PromptTokens > 0 {
			usage.PromptTokens = ev.PromptTokens
		}
		usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
		switch {
		case stopped:
			return engine.FinishStop, resp.finish(piece, toks, engine.FinishStop, usage)
		case ev.Finish == engine.FinishAbort:
			return "", errors.New("the engine aborted the request")
		case ev.Finish != "":
			rest, restToks, stoppedAtEnd := text.finish()
			reason := ev.Finish
			if stoppedAtEnd {
				reason = engine.FinishStop
			}
			return reason, resp.finish(piece+rest, append(toks, restToks...), reason, usage)
		}
		if err := resp.delta(piece, toks); err != nil {
			return "", err
		}
	}
}

// response builds the endpoint's JSON objects for one request.
type response struct {
	s       *Server
	j       *job
	id      string
	created int64
	out     responder

	text     []byte
	tokens   []tokenRecord
	pending  []tokenRecord // released tokens not yet sent (their text was empty)
	sentRole bool
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

func (r *response) delta(piece string, toks []tokenRecord) error {
	r.text = append(r.text, piece...)
	r.tokens = append(r.tokens, toks...)
	if !r.j.stream {
		return nil
	}
	r.pending = append(r.pending, toks...)
	if piece == "" {
		return nil
	}
	err := r.out.event(r.chunk(piece, r.pending, nil, nil))
	r.pending = r.pending[:0]
	return err
}

func (r *response) finish(piece string, toks []tokenRecord, reason string, usage Usage) error {
	r.text = append(r.text, piece...)
	r.tokens = append(r.tokens, toks...)
	if !r.j.stream {
		return r.out.whole(r.wholeBody(reason, usage))
	}
	r.pending = append(r.pending, toks...)
	if err := r.out.event(r.chunk(piece, r.pending, &reason, nil)); err != nil {
		return err
	}
	if r.j.includeUsage {
		if err := r.out.event(r.chunk("", nil, nil, &usage)); err != nil {
			return err
		}
	}
	return r.out.done()
}

// chunk is one streamed event; with usage set it is the final usage-only
// event (no choices).
func (r *response) chunk(piece string, toks []tokenRecord, reason *string, usage *Usage) any {
	if r.j.chat {
		c := ChatChunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.s.cfg.ModelName, Usage: usage}
		if usage == nil {
			d := ChatDelta{Content: piece}
			if !r.sentRole {
				d.Role, r.sentRole = "assistant", true
			}
			c.Choices = []ChatChunkChoice{{Delta: d, Logprobs: r.chatLogprobs(toks), FinishReason: reason}}
		} else {
			c.Choices = []ChatChunkChoice{}
		}
		return c
	}
	c := CompletionResponse{ID: r.id, Object: "text_completion", Created: r.created, Model: r.s.cfg.ModelName, Usage: usage}
	if usage == nil {
		c.Choices = []CompletionChoice{{Text: piece, Logprobs: r.completionLogprobs(toks), FinishReason: reason}}
	} else {
		c.Choices = []CompletionChoice{}
	}
	return c
}

func (r *response) wholeBody(reason string, usage Usage) any {
	if r.j.chat {
		return ChatResponse{ID: r.id, Object: "chat.completion", Created: r.created, Model: r.s.cfg.ModelName,
			Choices: []ChatChoice{{Message: ChatOutput{Role: "assistant", Content: string(r.text)},
				Logprobs: r.chatLogprobs(r.tokens), FinishReason: reason}},
			Usage: &usage}
	}
	return CompletionResponse{ID: r.id, Object: "text_completion", Created: r.created, Model: r.s.cfg.ModelName,
		Choices: []CompletionChoice{{Text: string(r.text), Logprobs: r.completionLogprobs(r.tokens), FinishReason: &reason}},
		Usage:   &usage}
}

func (r *response) chatLogprobs(toks []tokenRecord) *ChatLogprobs {
	if !r.j.logprobs {
		return nil
	}
	lp := &ChatLogprobs{Content: make([]ChatTokenLogprob, len(toks))}
	for i, t := range toks {
		s := r.s.cfg.Tokenizer.Decode([]int{t.id}, false)
		b := make([]int, len(s))
		for k := range len(s) {
			b[k] = int(s[k])
		}
		lp.Content[i] = ChatTokenLogprob{Token: s, Logprob: t.logprob, Bytes: b, TopLogprobs: []ChatTokenLogprob{}}
	}
	return lp
}

func (r *response) completionLogprobs(toks []tokenRecord) *CompletionLogprobs {
	if !r.j.logprobs {
		return nil
	}
	lp := &CompletionLogprobs{
		Tokens:        make([]string, len(toks)),
		TokenLogprobs: make([]float64, len(toks)),
		TopLogprobs:   make([]map[string]float64, len(toks)),
		TextOffset:    make([]int, len(toks)),
	}
	for i, t := range toks {
		s := r.s.cfg.Tokenizer.Decode([]int{t.id}, false)
		lp.Tokens[i] = s
		lp.TokenLogprobs[i] = t.logprob
		lp.TopLogprobs[i] = map[string]float64{s: t.logprob}
		lp.TextOffset[i] = t.offset
	}
	return lp
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
