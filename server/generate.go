package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cpmla/cpmla/engine"
)

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	handleGeneration(s, w, r, servedChat, s.parseChat)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	handleGeneration(s, w, r, servedCompletion, s.parseCompletion)
}

// handleGeneration answers one generation request of body type T: it
// decodes the body (refusing fields outside served), parses it into a job
// while holding one of the prompt workers' slots, and runs the job.
func handleGeneration[T any](s *Server, w http.ResponseWriter, r *http.Request, served []string, parse func(*T) (*job, *apiError)) {
	arrival := time.Now()
	var req T
	if e := s.decodeRequest(w, r, &req, served); e != nil {
		s.reject(w, e)
		return
	}
	release, e := s.prepare(r.Context())
	if e != nil {
		s.reject(w, e)
		return
	}
	j, e := parse(&req)
	release()
	if e != nil {
		s.reject(w, e)
		return
	}
	s.generate(w, r, j, arrival)
}

// decodeRequest decodes a request body and refuses, naming it, the first
// field the endpoint neither serves nor knows to be inert.
func (s *Server) decodeRequest(w http.ResponseWriter, r *http.Request, v any, served []string) *apiError {
	body, e := decodeBody(w, r, v)
	if e != nil {
		return e
	}
	s.afterBigBody(len(body))
	if f := unknownField(body, served); f != "" {
		return badRequest(f, "%s is not supported by this server; leave it out (docs/serving.md lists the fields it serves)", f)
	}
	return nil
}

// reject answers a request that never reaches the engine.
func (s *Server) reject(w http.ResponseWriter, e *apiError) {
	s.metrics.rejected.WithLabelValues(s.cfg.ModelName, fmt.Sprint(e.status)).Inc()
	writeError(w, e)
}

// stream is one engine request of a job: one prompt and its n choices.
type stream struct {
	p      int
	cancel context.CancelFunc
	events <-chan engine.Event
	timer  *requestTimer
	open   int // choices not finished
	done   bool
}

// tagged is an event of stream p; closed marks the end of its channel.
type tagged struct {
	p      int
	ev     engine.Event
	closed bool
}

// generate admits j, runs its prompts on the engine and writes the response.
// Every engine request's context ends when generate returns.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, j *job, arrival time.Time) {
	if !s.admit(len(j.prompts)) {
		s.reject(w, &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "server_overloaded",
			msg: fmt.Sprintf("the server already has %d requests in flight, its limit (the engine's running slots plus --max-queue); retry later or start the server with a larger --max-queue", cap(s.slots))})
		return
	}
	defer s.release(len(j.prompts))
	var constraint engine.ConstraintFactory
	if g, e := s.compileConstraint(j); e != nil {
		s.reject(w, e)
		return
	} else if g != nil {
		constraint = matchers{g}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	id := newID(prefix)
	if j.id != "" {
		id = prefix + j.id
	}
	streams := make([]*stream, len(j.prompts))
	merged := make(chan tagged)
	for p, pj := range j.prompts {
		sctx, scancel := context.WithCancel(ctx)
		st := &stream{p: p, cancel: scancel, open: j.n, timer: s.metrics.admit(arrival, len(pj.ids), pj.maxTokens, j.n)}
		streams[p] = st
		stop := slices.Clone(j.stopIDs)
		if !j.ignoreEOS {
			stop = append(stop, s.cfg.StopTokenIDs...)
		}
		req := engine.Request{
			ID: fmt.Sprintf("%s-%d", id, p), PromptIDs: pj.ids, MaxTokens: pj.maxTokens, N: j.n, Sampling: j.params,
			StopTokenIDs: stop, IgnoreEOS: j.ignoreEOS, TopLogprobs: j.topLogprobs,
			ScorePrompt: j.promptLogprobs >= 0, PromptTopLogprobs: max(j.promptLogprobs, 0),
			Constraint: constraint,
		}
		if len(j.stops) > 0 {
			// The engine ends each sequence where its choice's textStream
			// will find the stop string: same stops, decoder and min_tokens.
			req.StopText = newStopMatchers(s.cfg.Tokenizer, j.stops, j.keepsSpecial(), j.params.MinTokens)
		}
		events, err := s.cfg.Engine.Submit(sctx, req)
		if err != nil {
			for _, o := range streams[:p+1] {
				o.timer.end(time.Now(), "")
			}
			s.cfg.Logger.Warn("engine refused request", "id", id, "err", err)
			if errors.Is(err, engine.ErrOverloaded) {
				s.reject(w, &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "server_overloaded",
					msg: fmt.Sprintf("the engine's queue is full (%v); retry later or start the server with a larger --max-queue", err)})
				return
			}
			code := ""
			if errors.Is(err, engine.ErrFailed) {
				code = "engine_failed"
			}
			writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: code,
				msg: fmt.Sprintf("the engine did not accept the request: %v", err)})
			return
		}
		st.events = events
		go forward(ctx, p, events, merged)
	}

	var out responder
	if j.stream {
		out = &streamResponder{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	} else {
		out = &wholeResponder{w: w}
	}
	resp := newResponse(s, j, id, arrival.Unix(), out)
	err := s.follow(ctx, j, streams, merged, resp)
	now := time.Now()
	switch {
	case err != nil && errors.Is(context.Cause(r.Context()), errRequestTimeout):
		for _, st := range streams {
			st.timer.end(now, engine.FinishAbort)
		}
		out.fail(&apiError{status: http.StatusGatewayTimeout, typ: "server_error", code: "request_timeout",
			msg: fmt.Sprintf("the request ran longer than the server's --request-timeout %v; ask for fewer tokens, or start the server with a longer --request-timeout", s.cfg.HTTP.RequestTimeout)})
	case err != nil && ctx.Err() != nil && r.Context().Err() != nil:
		// The client is gone: nothing to write to.
		for _, st := range streams {
			st.timer.end(now, engine.FinishAbort)
		}
	case err != nil:
		for _, st := range streams {
			st.timer.end(now, engine.FinishAbort)
		}
		s.cfg.Logger.Warn("request failed", "id", id, "err", err)
		out.fail(&apiError{status: http.StatusInternalServerError, typ: "server_error", msg: err.Error()})
	}
}

// forward copies one engine stream into merged until it closes or ctx ends.
func forward(ctx context.Context, p int, events <-chan engine.Event, merged chan<- tagged) {
	for ev := range events {
		select {
		case merged <- tagged{p: p, ev: ev}:
		case <-ctx.Done():
			return
		}
	}
	select {
	case merged <- tagged{p: p, closed: true}:
	case <-ctx.Done():
	}
}

// follow reads the engine's events for every choice of j until all have
// finished, the client goes away or a write fails.
func (s *Server) follow(ctx context.Context, j *job, streams []*stream, merged <-chan tagged, resp *response) error {
	left := len(streams)
	for left > 0 {
		var t tagged
		select {
		case <-ctx.Done():
			return fmt.Errorf("request cancelled: %w", context.Cause(ctx))
		case t = <-merged:
		}
		st := streams[t.p]
		if t.closed {
			if !st.done {
				return errors.New("the engine closed the request's stream without a finish reason")
			}
			continue
		}
		ev := t.ev
		if ev.Err != nil {
			return fmt.Errorf("engine: %w", ev.Err)
		}
		if st.done {
			continue
		}
		c := resp.choices[t.p*j.n+ev.Index]
		if !ev.Scheduled.IsZero() {
			st.timer.scheduled(ev.Scheduled)
		}
		if ev.Prompt != nil {
			resp.promptLPs[t.p] = ev.Prompt
		}
		if c.finished {
			continue // ended by a stop string (the engine ended it in the same step)
		}
		// The last event carries a token too when the engine counts one
		// more output token than have arrived.
		var piece string
		var toks []tokenRecord
		stopped := false
		if ev.Finish == "" || ev.OutputTokens > c.received {
			c.received++
			st.timer.token(time.Now())
			rec := tokenRecord{id: ev.Token, logprob: ev.Logprob, top: ev.Top}
			// A stop token's text is left out (vLLM); it only shows when
			// special tokens are kept for a chat parser.
			// Any active stop id ends the sequence, so it is its last token.
			hidden := !j.includeStop && (slices.Contains(j.stopIDs, ev.Token) || (!j.ignoreEOS && slices.Contains(s.cfg.StopTokenIDs, ev.Token)))
			if slices.Contains(j.stopIDs, ev.Token) {
				c.stopReason = ev.Token
			}
			piece, toks, stopped = c.text.addToken(rec, hidden)
		}
		reason := ""
		switch {
		case stopped:
			reason = engine.FinishStop
			c.stopReason = c.text.stopStr
		case ev.Finish == engine.FinishAbort:
			return errors.New("the engine aborted the request")
		case ev.Finish != "":
			rest, restToks, stoppedAtEnd := c.text.finish()
			piece, toks = piece+rest, append(toks, restToks...)
			reason = ev.Finish
			if stoppedAtEnd {
				reason, c.stopReason = engine.FinishStop, c.text.stopStr
			}
		}
		if reason == "" {
			if err := resp.delta(c, piece, toks); err != nil {
				return err
			}
			continue
		}
		c.finished = true
		st.open--
		if st.open == 0 {
			st.done = true
			st.cancel() // the engine ended its sequences at their stops; this frees any it still runs
			st.timer.end(time.Now(), reason)
			left--
		}
		if err := resp.finishChoice(c, piece, toks, reason, left == 0); err != nil {
			return err
		}
	}
	return nil
}
