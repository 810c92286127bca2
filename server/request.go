package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/cpmla/cpmla/chatparse"
	"github.com/cpmla/cpmla/grammar"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/tokenizer"
)

// maxStops is the most stop strings a request may give (OpenAI's limit).
const maxStops = 4

// job is a validated request, ready for the engine: one engine request per
// prompt, each sampling n choices.
type job struct {
	chat    bool
	id      string
	prompts []promptJob
	n       int
	params  sampler.Params
	stops   []string
	// spec is the request's structured output (nil: none), given by the
	// field specParam.
	spec      *grammar.Spec
	specParam string
	// stopIDs are the request's stop_token_ids (the model's EOS is added
	// unless ignoreEOS).
	stopIDs         []int
	ignoreEOS       bool
	includeStop     bool
	stream          bool
	includeUsage    bool
	continuousUsage bool
	// logprobs reports the sampled tokens' logprobs with topLogprobs
	// alternatives each.
	logprobs    bool
	topLogprobs int
	// promptLogprobs ≥ 0 returns vLLM's prompt_logprobs with that many
	// alternatives; echo (completions) prefixes the prompt to the text and,
	// with logprobs, its tokens to the logprobs.
	promptLogprobs int
	echo           bool
	asTokenIDs     bool
	// truncate > 0 keeps only the prompt's last truncate tokens.
	truncate int

	keepSpecial bool // skip_special_tokens false
	// Chat output parsing: the parsers to run on each choice (none when
	// both are empty), the tools whose schemas type arguments and the
	// chat_template_kwargs; and whether more than one call may be returned.
	parsing        chatparse.Options
	singleToolCall bool
}

// promptJob is one prompt of a job.
type promptJob struct {
	ids       []int
	text      string // the prompt as text, for echo
	maxTokens int
}

// tooLarge is the refusal of a body over maxBodyBytes (its declared length,
// or -1 when it had none and ran over while read).
func tooLarge(declared int64) *apiError {
	msg := fmt.Sprintf("request body is larger than %d bytes; send a shorter prompt", int64(maxBodyBytes))
	if declared >= 0 {
		msg = fmt.Sprintf("request body of %d bytes (Content-Length) is larger than %d bytes; send a shorter prompt", declared, int64(maxBodyBytes))
	}
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", msg: msg}
}

// decodeBody reads a JSON request body into v and returns the body. A body
// that is not JSON, or whose field has the wrong JSON type, is refused with
// a message in the request's terms (the field's JSON path in param, the JSON
// type wanted and the one sent), never the decoder's Go types.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, *apiError) {
	if r.ContentLength > maxBodyBytes {
		// Declared too large: refused before a byte of it is read, so the
		// answer does not depend on how fast the client sends it.
		return nil, tooLarge(r.ContentLength)
	}
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, tooLarge(-1)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &apiError{status: http.StatusRequestTimeout, typ: "invalid_request_error",
				msg: "the request body did not arrive in time (--http-body-timeout); send it at once"}
		}
		return nil, badRequest("", "read request body: %v", err)
	}
	if e := decodeJSON(buf.Bytes(), v); e != nil {
		return nil, e
	}
	return buf.Bytes(), nil
}

// decodeJSON decodes data into v, turning decoder errors into refusals in
// the request's terms.
func decodeJSON(data []byte, v any) *apiError {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return badRequest("", "request body is not a valid request: it is not valid JSON at byte %d (%s)", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return badRequest("", "request body is not a valid request: the JSON ends early")
	}
	path, leaf := locate(reflect.TypeOf(v).Elem(), data)
	if leaf == nil {
		path, leaf = "", err
	}
	return refusal(path, leaf)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// locate finds the value of data that t cannot decode: it walks objects
// and arrays the way encoding/json does (JSON names, promoted fields of
// embedded structs) and decodes each leaf, or each value with a decoder of
// its own, alone. It returns that value's JSON path ("messages[1].role")
// and its error, or a nil error if every part decodes alone.
func locate(t reflect.Type, data []byte) (string, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	custom := reflect.PointerTo(t).Implements(unmarshalerType)
	switch {
	case !custom && t.Kind() == reflect.Struct:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			return "", err
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fieldByJSONName(t, k)
			if !ok {
				continue
			}
			if p, err := locate(ft, obj[k]); err != nil {
				return joinPath(k, p), err
			}
		}
		return "", nil
	case !custom && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && t.Elem().Kind() != reflect.Uint8:
		var arr []json.RawMessage
		if err := json.Unmarshal(data, &arr); err != nil {
			return "", err
		}
		for i, raw := range arr {
			if p, err := locate(t.Elem(), raw); err != nil {
				if p != "" && !strings.HasPrefix(p, "[") {
					p = "." + p
				}
				return fmt.Sprintf("[%d]", i) + p, err
			}
		}
		return "", nil
	}
	return "", json.Unmarshal(data, reflect.New(t).Interface())
}

// joinPath appends the path p below key k.
func joinPath(k, p string) string {
	switch {
	case p == "":
		return k
	case strings.HasPrefix(p, "["):
		return k + p
	}
	return k + "." + p
}

// fieldByJSONName is the type of the field of struct t that decodes the
// JSON key name, looking through embedded structs as encoding/json does.
func fieldByJSONName(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if sf.Anonymous && tag == "" {
			et := sf.Type
			for et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				if ft, ok := fieldByJSONName(et, name); ok {
					return ft, true
				}
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if tag == name || tag == "" && strings.EqualFold(sf.Name, name) {
			return sf.Type, true
		}
	}
	return nil, false
}

// refusal words err, the decoding error of the value at path, as a 400 with
// param path: a type mismatch names the JSON type wanted and the one sent;
// a field's own decoder keeps its words, without the decoder's Go types.
func refusal(path string, err error) *apiError {
	var typ *json.UnmarshalTypeError
	isType := errors.As(err, &typ)
	msg := err.Error()
	own, _, wrapped := strings.Cut(msg, ": json: ")
	switch {
	case wrapped && isType:
		return badRequest(path, "%s, got %s", own, jsonKind(typ.Value))
	case isType && path == "":
		return badRequest("", "request body is not a valid request: it must be a JSON object, got %s", jsonKind(typ.Value))
	case isType:
		return badRequest(path, "%s must be %s, got %s", path, jsonTypeName(typ.Type), jsonKind(typ.Value))
	case wrapped:
		return badRequest(path, "%s", own)
	}
	return badRequest(path, "%s", strings.TrimPrefix(msg, "json: "))
}

// jsonTypeName names the JSON type a Go type decodes from.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}

// jsonKind words the decoder's description of the value sent ("string",
// "number 1e999", "array").
func jsonKind(v string) string {
	switch {
	case v == "string", v == "array", v == "object", v == "bool":
		if v == "bool" {
			return "a boolean"
		}
		if v == "array" || v == "object" {
			return "an " + v
		}
		return "a " + v
	case v == "number":
		return "a number"
	case strings.HasPrefix(v, "number "):
		return "the " + v + ", out of range or not whole"
	}
	return v
}

// parseChat validates a chat request and renders its prompt.
func (s *Server) parseChat(req *ChatRequest) (*job, *apiError) {
	j := &job{chat: true, logprobs: req.Logprobs}
	if req.TopLogprobs != nil {
		if !req.Logprobs && *req.TopLogprobs > 0 {
			return nil, badRequest("top_logprobs", "top_logprobs is %d but logprobs is not true; set logprobs true to get them", *req.TopLogprobs)
		}
		if e := s.checkLogprobs("top_logprobs", *req.TopLogprobs); e != nil {
			return nil, e
		}
		j.topLogprobs = *req.TopLogprobs
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages is empty; give at least one message, e.g. [{\"role\":\"user\",\"content\":\"Hello\"}]")
	}
	msgs, e := chatMessages(req.Messages)
	if e != nil {
		return nil, e
	}
	if e := s.parseTools(req, j); e != nil {
		return nil, e
	}
	in := tokenizer.ChatInput{Messages: msgs, Tools: req.Tools, Documents: req.Documents,
		AddGenerationPrompt: req.AddGenerationPrompt == nil || *req.AddGenerationPrompt, Kwargs: req.ChatTemplateKwargs}
	if e := s.parseSampling(&req.samplingFields, j); e != nil { // truncate_prompt_tokens decides how to tokenize
		return nil, e
	}
	if j.spec != nil {
		// The constraint holds from the first token, so there is no
		// reasoning to split off (vLLM instead lets the model reason first).
		j.parsing.ReasoningParser = ""
	}
	text, err := s.cfg.Tokenizer.RenderChat(in)
	if err != nil {
		return nil, badRequest("messages", "render chat template: %v", err)
	}
	// The rendering carries its own BOS and control tokens.
	ids, e := s.encodeText("messages", text, tokenizer.EncodeOptions{ParseSpecial: true}, j.truncate)
	if e != nil {
		return nil, e
	}
	limit, field := req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		limit, field = req.MaxCompletionTokens, "max_completion_tokens"
	}
	pj, e := s.promptJob(ids, "", "messages", field, limit, j)
	if e != nil {
		return nil, e
	}
	j.prompts = []promptJob{pj}
	return j, nil
}

// chatMessages validates request messages and converts them for the chat
// template.
func chatMessages(in []ChatMessage) ([]tokenizer.Message, *apiError) {
	msgs := make([]tokenizer.Message, len(in))
	for i, m := range in {
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
		msgs[i] = tokenizer.Message{Role: m.Role, Content: m.Content.Text, Name: m.Name, ToolCallID: m.ToolCallID, Reasoning: m.ReasoningContent}
		if m.Reasoning != nil && m.ReasoningContent == nil {
			msgs[i].Reasoning = m.Reasoning
		}
		for _, c := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, tokenizer.ToolCall{ID: c.ID, Type: c.Type, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
	}
	return msgs, nil
}

// parseTools validates tools, tool_choice and chat_template_kwargs and
// chooses the output parsers, as vLLM does: tool_choice "auto" (the default
// when tools are given) parses tool calls and needs
// --enable-auto-tool-choice; "none" renders the tools and parses none.
func (s *Server) parseTools(req *ChatRequest, j *job) *apiError {
	if len(req.ChatTemplateKwargs) > 0 {
		j.parsing.ChatTemplateKwargs = make(map[string]any, len(req.ChatTemplateKwargs))
		for k, raw := range req.ChatTemplateKwargs {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return badRequest("chat_template_kwargs", "chat_template_kwargs.%s is not JSON: %v", k, err)
			}
			j.parsing.ChatTemplateKwargs[k] = v
		}
	}
	j.parsing.ReasoningParser = s.cfg.ReasoningParser
	choice := "none"
	if len(req.Tools) > 0 {
		choice = "auto"
	}
	if t := bytes.TrimSpace(req.ToolChoice); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &choice); err != nil {
			return badRequest("tool_choice", "tool_choice %s names a function; this server does not force a call (no guided decoding, which the GLM and DeepSeek tool formats do not use): use \"auto\" or \"none\"", t)
		}
	}
	switch choice {
	case "none":
	case "auto":
		if len(req.Tools) == 0 {
			return badRequest("tool_choice", "tool_choice is \"auto\" but the request has no tools")
		}
		if !s.cfg.AutoToolChoice {
			return badRequest("tool_choice", "\"auto\" tool choice requires the server to run with --enable-auto-tool-choice and --tool-call-parser (one of %s)", strings.Join(chatparse.ToolParsers(), ", "))
		}
		j.parsing.ToolParser = s.cfg.ToolCallParser
	case "required":
		return badRequest("tool_choice", "tool_choice \"required\" needs guided decoding, which this server does not do; use \"auto\"")
	default:
		return badRequest("tool_choice", "tool_choice is %q; use \"auto\" or \"none\"", choice)
	}
	for i, raw := range req.Tools {
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &tool); err != nil || tool.Function == nil || tool.Function.Name == "" || (tool.Type != "" && tool.Type != "function") {
			return badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d] must be {\"type\":\"function\",\"function\":{\"name\":...,\"parameters\":{...}}}", i)
		}
		j.parsing.Tools = append(j.parsing.Tools, chatparse.Tool{Name: tool.Function.Name, Parameters: tool.Function.Parameters})
	}
	j.singleToolCall = req.ParallelToolCalls != nil && !*req.ParallelToolCalls
	if _, err := chatparse.New(j.parsing); err != nil {
		return badRequest("tools", "%v", err)
	}
	return nil
}

// parses reports whether j's choices go through chatparse.
func (j *job) parses() bool {
	return j.chat && (j.parsing.ToolParser != "" || j.parsing.ReasoningParser != "")
}

// keepsSpecial reports whether the output text keeps special tokens: for a
// chat parser, or when the request asks for it.
func (j *job) keepsSpecial() bool { return j.parses() || j.keepSpecial }

// parseCompletion validates a completion request and tokenizes its prompts.
func (s *Server) parseCompletion(req *CompletionRequest) (*job, *apiError) {
	j := &job{echo: req.Echo}
	if req.Logprobs != nil {
		if e := s.checkLogprobs("logprobs", *req.Logprobs); e != nil {
			return nil, e
		}
		j.logprobs, j.topLogprobs = true, *req.Logprobs
	}
	if !req.Prompt.Set {
		return nil, badRequest("prompt", "prompt is missing; give a string, an array of token ids, or an array of either")
	}
	if e := s.parseSampling(&req.samplingFields, j); e != nil {
		return nil, e
	}
	// vLLM: echo with logprobs returns the prompt's logprobs too.
	if j.echo && j.logprobs && j.promptLogprobs < 0 {
		j.promptLogprobs = j.topLogprobs
	}
	if n := len(req.Prompt.Items) * j.n; n > s.cfg.MaxInFlight {
		return nil, badRequest("prompt", "the request holds %d prompts × n %d = %d sequences, more than the server runs at once (%d); send fewer prompts per request",
			len(req.Prompt.Items), j.n, n, s.cfg.MaxInFlight)
	}
	addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
	for i, it := range req.Prompt.Items {
		param := "prompt"
		if len(req.Prompt.Items) > 1 {
			param = fmt.Sprintf("prompt[%d]", i)
		}
		ids, text := it.IDs, it.Text
		if it.IsIDs {
			for k, id := range ids {
				if id < 0 || id >= s.cfg.VocabSize {
					return nil, badRequest(param, "%s[%d] = %d is not a token id; ids run from 0 to %d", param, k, id, s.cfg.VocabSize-1)
				}
			}
			text = s.cfg.Tokenizer.Decode(ids, false)
		} else {
			var e *apiError
			if ids, e = s.encodeText(param, text, tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: true}, j.truncate); e != nil {
				return nil, e
			}
		}
		pj, e := s.promptJob(ids, text, param, "max_tokens", req.MaxTokens, j)
		if e != nil {
			return nil, e
		}
		j.prompts = append(j.prompts, pj)
	}
	return j, nil
}

// checkLogprobs bounds a logprobs count by --max-logprobs.
func (s *Server) checkLogprobs(field string, n int) *apiError {
	if n < 0 || n > s.cfg.MaxLogprobs {
		return badRequest(field, "%s is %d; this server returns from 0 to %d (--max-logprobs) most likely tokens", field, n, s.cfg.MaxLogprobs)
	}
	return nil
}

// promptJob truncates a prompt (truncate_prompt_tokens), checks its length
// and sizes its output; promptParam names the prompt field in errors.
func (s *Server) promptJob(ids []int, text, promptParam, field string, limit *int, j *job) (promptJob, *apiError) {
	if j.truncate > 0 && len(ids) > j.truncate {
		ids = ids[len(ids)-j.truncate:]
		text = s.cfg.Tokenizer.Decode(ids, false)
	}
	pj := promptJob{ids: ids, text: text}
	n := len(ids)
	if n == 0 {
		return pj, badRequest(promptParam, "the prompt is empty; give at least one token")
	}
	for k, id := range ids {
		// Ids a client sent were checked already; these come from the
		// tokenizer, whose vocabulary may be larger than the model's.
		if id < 0 || id >= s.cfg.VocabSize {
			return pj, badRequest(promptParam, "the prompt tokenizes to id %d at token %d, but the model has ids 0 to %d only: the tokenizer does not match the model; start the server with the model's own tokenizer (--tokenizer DIR)",
				id, k, s.cfg.VocabSize-1)
		}
	}
	if n >= s.cfg.MaxModelLen && !(limit != nil && *limit == 0 && j.echo && n == s.cfg.MaxModelLen) {
		return pj, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: promptParam, code: "context_length_exceeded",
			msg: fmt.Sprintf("the prompt has %d tokens but the maximum model length (--max-model-len) is %d, which leaves no room to generate; shorten the prompt to at most %d tokens or start the server with --max-model-len %d or more",
				n, s.cfg.MaxModelLen, s.cfg.MaxModelLen-1, n+1)}
	}
	room := s.cfg.MaxModelLen - n
	switch {
	case limit == nil:
		pj.maxTokens = room
	case *limit == 0 && j.echo:
		pj.maxTokens = 0 // score the prompt only
	case *limit < 1:
		return pj, badRequest(field, "%s is %d; ask for at least 1 token (0 only with echo, to score the prompt)", field, *limit)
	case *limit > room:
		return pj, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: field, code: "context_length_exceeded",
			msg: fmt.Sprintf("the prompt has %d tokens and %s is %d, %d in all, more than the maximum model length (--max-model-len) %d; ask for at most %d tokens or shorten the prompt",
				n, field, *limit, n+*limit, s.cfg.MaxModelLen, room)}
	default:
		pj.maxTokens = *limit
	}
	if pj.maxTokens == 0 && j.promptLogprobs < 0 {
		j.promptLogprobs = 0 // echo of the prompt alone still scores it
	}
	if j.params.MinTokens > pj.maxTokens && pj.maxTokens > 0 {
		return pj, badRequest("min_tokens", "min_tokens %d is more than the %d tokens %s allows; lower min_tokens", j.params.MinTokens, pj.maxTokens, field)
	}
	return pj, nil
}

// parseSampling validates the fields both endpoints share.
func (s *Server) parseSampling(f *samplingFields, j *job) *apiError {
	if f.Model != "" && f.Model != s.cfg.ModelName {
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
			msg: fmt.Sprintf("the model %q does not exist; this server serves %q", f.Model, s.cfg.ModelName)}
	}
	j.n = 1
	if f.N != nil {
		if *f.N < 1 || *f.N > s.cfg.MaxN {
			return badRequest("n", "n is %d; this server samples from 1 to %d choices per prompt (--max-num-seqs)", *f.N, s.cfg.MaxN)
		}
		j.n = *f.N
	}
	switch {
	case f.BestOf != nil && *f.BestOf != j.n:
		return badRequest("best_of", "best_of is %d; this server returns every sequence it samples: leave best_of out or set it to n (%d)", *f.BestOf, j.n)
	case f.UseBeamSearch:
		return badRequest("use_beam_search", "use_beam_search is true; this server samples without beam search: leave it out or set it to false")
	case f.Priority != nil && *f.Priority != 0:
		return badRequest("priority", "priority is %d; this server schedules first come, first served: leave priority out or set it to 0", *f.Priority)
	}
	j.keepSpecial = f.SkipSpecialTokens != nil && !*f.SkipSpecialTokens
	if len(f.Stop) > maxStops {
		return badRequest("stop", "stop has %d strings; give at most %d", len(f.Stop), maxStops)
	}
	for i, st := range f.Stop {
		if st == "" {
			return badRequest("stop", "stop[%d] is empty; stop strings must have at least one character", i)
		}
	}
	j.stops = f.Stop
	j.includeStop = f.IncludeStopStrInOutput
	j.stream = f.Stream
	if f.StreamOptions != nil {
		if !f.Stream {
			return badRequest("stream_options", "stream_options is only allowed with stream true")
		}
		j.includeUsage = f.StreamOptions.IncludeUsage
		j.continuousUsage = f.StreamOptions.ContinuousUsageStats
	}
	j.ignoreEOS = f.IgnoreEOS
	j.asTokenIDs = f.ReturnTokensAsTokenIDs
	j.id = f.RequestID
	if len(j.id) > 128 {
		return badRequest("request_id", "request_id has %d characters; use at most 128", len(j.id))
	}
	if f.TruncatePromptTokens != nil {
		switch k := *f.TruncatePromptTokens; {
		case k == -1:
			j.truncate = s.cfg.MaxModelLen
		case k < 1:
			return badRequest("truncate_prompt_tokens", "truncate_prompt_tokens is %d; use -1 (the model length) or at least 1", k)
		default:
			j.truncate = k
		}
	}
	j.promptLogprobs = -1
	if f.PromptLogprobs != nil {
		if f.Stream {
			return badRequest("prompt_logprobs", "prompt_logprobs is not available with stream true (as in vLLM); leave one of them out")
		}
		if e := s.checkLogprobs("prompt_logprobs", *f.PromptLogprobs); e != nil {
			return e
		}
		j.promptLogprobs = *f.PromptLogprobs
	}
	for i, id := range f.StopTokenIDs {
		if id < 0 || id >= s.cfg.VocabSize {
			return badRequest("stop_token_ids", "stop_token_ids[%d] = %d is not a token id; ids run from 0 to %d", i, id, s.cfg.VocabSize-1)
		}
	}
	j.stopIDs = f.StopTokenIDs

	p := sampler.Params{Temperature: 1, TopP: 1}
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&p.Temperature, f.Temperature)
	set(&p.TopP, f.TopP)
	set(&p.MinP, f.MinP)
	set(&p.FrequencyPenalty, f.FrequencyPenalty)
	set(&p.PresencePenalty, f.PresencePenalty)
	p.RepetitionPenalty = 1
	set(&p.RepetitionPenalty, f.RepetitionPenalty)
	if f.TopK != nil {
		p.TopK = *f.TopK
	}
	if f.MinTokens != nil {
		p.MinTokens = *f.MinTokens
	}
	if t := p.Temperature; t < 0 || t > 2 || math.IsNaN(t) {
		return badRequest("temperature", "temperature is %v; use a value from 0 (greedy) to 2", t)
	}
	if v := p.TopP; !(v > 0 && v <= 1) {
		return badRequest("top_p", "top_p is %v; use a value in (0, 1], e.g. 1", v)
	}
	if p.TopK < -1 {
		return badRequest("top_k", "top_k is %d; use -1 or 0 (all tokens) or at least 1", p.TopK)
	}
	if v := p.MinP; !(v >= 0 && v <= 1) {
		return badRequest("min_p", "min_p is %v; use a value in [0, 1]", v)
	}
	for _, pen := range []struct {
		name string
		v    float64
	}{{"frequency_penalty", p.FrequencyPenalty}, {"presence_penalty", p.PresencePenalty}} {
		if !(math.Abs(pen.v) <= sampler.MaxPenalty) {
			return badRequest(pen.name, "%s is %v; use a value from -2 to 2", pen.name, pen.v)
		}
	}
	if v := p.RepetitionPenalty; !(v > 0 && v <= 2) || math.IsInf(v, 0) {
		return badRequest("repetition_penalty", "repetition_penalty is %v; use a value in (0, 2] (1: none)", v)
	}
	if p.MinTokens < 0 {
		return badRequest("min_tokens", "min_tokens is %d; use 0 or more", p.MinTokens)
	}
	if len(f.LogitBias) > 0 {
		p.LogitBias = make(map[int]float64, len(f.LogitBias))
		for k, v := range f.LogitBias {
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 || id >= s.cfg.VocabSize {
				return badRequest("logit_bias", "logit_bias key %q is not a token id; keys are ids from 0 to %d", k, s.cfg.VocabSize-1)
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return badRequest("logit_bias", "logit_bias of token %d is %v; use a number from -100 to 100", id, v)
			}
			p.LogitBias[id] = v
		}
	}
	if f.AllowedTokenIDs != nil {
		if len(f.AllowedTokenIDs) == 0 {
			return badRequest("allowed_token_ids", "allowed_token_ids is empty; give at least one token id or leave it out")
		}
		for i, id := range f.AllowedTokenIDs {
			if id < 0 || id >= s.cfg.VocabSize {
				return badRequest("allowed_token_ids", "allowed_token_ids[%d] = %d is not a token id; ids run from 0 to %d", i, id, s.cfg.VocabSize-1)
			}
		}
		p.AllowedTokenIDs = f.AllowedTokenIDs
	}
	if f.Seed != nil {
		p.Seed = uint64(*f.Seed)
	} else {
		p.Seed = rand.Uint64()
	}
	j.params = p
	return s.parseStructured(&f.structuredFields, j)
}
