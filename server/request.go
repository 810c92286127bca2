package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"

	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/tokenizer"
)

// maxStops is the most stop strings a request may give (OpenAI's limit).
const maxStops = 4

// job is a validated request, ready for the engine.
type job struct {
	chat         bool
	promptIDs    []int
	maxTokens    int
	params       sampler.Params
	stops        []string
	stream       bool
	includeUsage bool
	logprobs     bool
	ignoreEOS    bool
}

// decodeBody reads a JSON request body into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
				msg: fmt.Sprintf("request body is larger than %d bytes; send a shorter prompt", tooBig.Limit)}
		}
		return badRequest("", "read request body: %v", err)
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		return badRequest("", "request body is not a valid request: %v", err)
	}
	return nil
}

// parseChat validates a chat request and renders its prompt.
func (s *Server) parseChat(req *ChatRequest) (*job, *apiError) {
	j := &job{chat: true, logprobs: req.Logprobs}
	if req.TopLogprobs != nil && *req.TopLogprobs != 0 {
		return nil, badRequest("top_logprobs", "top_logprobs is %d; this server returns only the chosen token's logprob: use top_logprobs 0 (or leave it out) with logprobs true", *req.TopLogprobs)
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages is empty; give at least one message, e.g. [{\"role\":\"user\",\"content\":\"Hello\"}]")
	}
	msgs := make([]tokenizer.Message, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		case "developer":
			m.Role = "system"
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is %q; use system, user, assistant or tool", i, m.Role)
		}
		if m.Content.Null && m.Role != "assistant" {
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content is null; only assistant messages may omit content", i)
		}
		msgs[i] = tokenizer.Message{Role: m.Role, Content: m.Content.Text}
	}
	ids, err := s.cfg.Tokenizer.EncodeChat(msgs, true)
	if err != nil {
		return nil, badRequest("messages", "render chat template: %v", err)
	}
	j.promptIDs = ids
	if e := s.parseSampling(&req.samplingFields, j, "messages"); e != nil {
		return nil, e
	}
	return j, nil
}

// parseCompletion validates a completion request and tokenizes its prompt.
func (s *Server) parseCompletion(req *CompletionRequest) (*job, *apiError) {
	j := &job{}
	if req.Logprobs != nil {
		if *req.Logprobs != 0 {
			return nil, badRequest("logprobs", "logprobs is %d; this server returns only the chosen token's logprob: use logprobs 0", *req.Logprobs)
		}
		j.logprobs = true
	}
	if req.Echo {
		return nil, badRequest("echo", "echo is not supported; leave it out or set it to false")
	}
	if req.BestOf != nil && *req.BestOf != 1 {
		return nil, badRequest("best_of", "best_of is %d; this server generates one sequence per request: use best_of 1", *req.BestOf)
	}
	if !req.Prompt.Set {
		return nil, badRequest("prompt", "prompt is missing; give a string or an array of token ids")
	}
	if req.Prompt.IsIDs {
		for i, id := range req.Prompt.IDs {
			if id < 0 || id >= s.cfg.VocabSize {
				return nil, badRequest("prompt", "prompt[%d] = %d is not a token id; ids run from 0 to %d", i, id, s.cfg.VocabSize-1)
			}
		}
		j.promptIDs = req.Prompt.IDs
	} else {
		j.promptIDs = s.cfg.Tokenizer.Encode(req.Prompt.Text, true)
	}
	if e := s.parseSampling(&req.samplingFields, j, "prompt"); e != nil {
		return nil, e
	}
	return j, nil
}

// parseSampling validates the fields both endpoints share and the prompt
// length; promptParam names the prompt field in errors.
func (s *Server) parseSampling(f *samplingFields, j *job, promptParam string) *apiError {
	if f.Model != "" && f.Model != s.cfg.ModelName {
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
			msg: fmt.Sprintf("the model %q does not exist; this server serves %q", f.Model, s.cfg.ModelName)}
	}
	if f.N != nil && *f.N != 1 {
		return badRequest("n", "n is %d; this server generates one choice per request: use n 1 and send more requests", *f.N)
	}
	if len(f.Stop) > maxStops {
		return badRequest("stop", "stop has %d strings; give at most %d", len(f.Stop), maxStops)
	}
	for i, st := range f.Stop {
		if st == "" {
			return badRequest("stop", "stop[%d] is empty; stop strings must have at least one character", i)
		}
	}
	j.stops = f.Stop
	j.stream = f.Stream
	if f.StreamOptions != nil {
		if !f.Stream {
			return badRequest("stream_options", "stream_options is only allowed with stream true")
		}
		j.includeUsage = f.StreamOptions.IncludeUsage
	}
	j.ignoreEOS = f.IgnoreEOS

	j.params = sampler.Params{Temperature: 1, TopP: 1}
	if f.Temperature != nil {
		j.params.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		j.params.TopP = *f.TopP
	}
	if t := j.params.Temperature; t < 0 || t > 2 || math.IsNaN(t) {
		return badRequest("temperature", "temperature is %v; use a value from 0 (greedy) to 2", t)
	}
	if p := j.params.TopP; !(p > 0 && p <= 1) {
		return badRequest("top_p", "top_p is %v; use a value in (0, 1], e.g. 1", p)
	}
	if f.Seed != nil {
		j.params.Seed = uint64(*f.Seed)
	} else {
		j.params.Seed = rand.Uint64()
	}

	n := len(j.promptIDs)
	if n == 0 {
		return badRequest(promptParam, "the prompt is empty; give at least one token")
	}
	if n >= s.cfg.MaxModelLen {
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: promptParam, code: "context_length_exceeded",
			msg: fmt.Sprintf("the prompt has %d tokens but the maximum model length (--max-model-len) is %d, which leaves no room to generate; shorten the prompt to at most %d tokens or start the server with --max-model-len %d or more",
				n, s.cfg.MaxModelLen, s.cfg.MaxModelLen-1, n+1)}
	}
	room := s.cfg.MaxModelLen - n
	field, limit := "max_tokens", f.MaxTokens
	if f.MaxCompletionTokens != nil {
		field, limit = "max_completion_tokens", f.MaxCompletionTokens
	}
	switch {
	case limit == nil:
		j.maxTokens = room
	case *limit < 1:
		return badRequest(field, "%s is %d; ask for at least 1 token", field, *limit)
	case *limit > room:
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: field, code: "context_length_exceeded",
			msg: fmt.Sprintf("the prompt has %d tokens and %s is %d, %d in all, more than the maximum model length (--max-model-len) %d; ask for at most %d tokens or shorten the prompt",
				n, field, *limit, n+*limit, s.cfg.MaxModelLen, room)}
	default:
		j.maxTokens = *limit
	}
	return nil
}
