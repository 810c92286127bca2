package server

import (
	"net/http"
	"strconv"

	"github.com/cpmla/cpmla/tokenizer"
)

// TokenizeRequest is the body of POST /tokenize: a prompt, or chat
// messages rendered with the chat template (vLLM's two shapes).
type TokenizeRequest struct {
	Model               string        `json:"model"`
	Prompt              *string       `json:"prompt"`
	Messages            []ChatMessage `json:"messages"`
	AddSpecialTokens    *bool         `json:"add_special_tokens"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
	ReturnTokenStrs     bool          `json:"return_token_strs"`
}

// TokenizeResponse is vLLM's answer to /tokenize.
type TokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int    `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// DetokenizeRequest is the body of POST /detokenize.
type DetokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

// DetokenizeResponse is vLLM's answer to /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

var (
	servedTokenize   = []string{"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt", "return_token_strs"}
	servedDetokenize = []string{"model", "tokens"}
)

func (s *Server) checkModel(model string) *apiError {
	if model != "" && model != s.cfg.ModelName {
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
			msg: "the model " + strconv.Quote(model) + " does not exist; this server serves " + strconv.Quote(s.cfg.ModelName)}
	}
	return nil
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req TokenizeRequest
	if e := s.decodeRequest(w, r, &req, servedTokenize); e != nil {
		s.reject(w, e)
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		s.reject(w, e)
		return
	}
	// Tokenized in the prompt pool, and refused once it provably exceeds
	// --max-model-len, as a generation request's prompt is.
	release, e := s.prepare(r.Context())
	if e != nil {
		s.reject(w, e)
		return
	}
	defer release()
	var ids []int
	switch {
	case req.Prompt != nil && req.Messages != nil:
		s.reject(w, badRequest("messages", "give prompt or messages, not both"))
		return
	case req.Prompt != nil:
		add := req.AddSpecialTokens == nil || *req.AddSpecialTokens
		if ids, e = s.encodeText("prompt", *req.Prompt, tokenizer.EncodeOptions{AddSpecial: add, ParseSpecial: true}, 0); e != nil {
			s.reject(w, e)
			return
		}
	case req.Messages != nil:
		msgs, e := chatMessages(req.Messages)
		if e != nil {
			s.reject(w, e)
			return
		}
		text, err := s.cfg.Tokenizer.ApplyChatTemplate(msgs, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
		if err != nil {
			s.reject(w, badRequest("messages", "render chat template: %v", err))
			return
		}
		if ids, e = s.encodeText("messages", text, tokenizer.EncodeOptions{ParseSpecial: true}, 0); e != nil {
			s.reject(w, e)
			return
		}
	default:
		s.reject(w, badRequest("prompt", "give prompt (a string) or messages"))
		return
	}
	resp := TokenizeResponse{Count: len(ids), MaxModelLen: s.cfg.MaxModelLen, Tokens: ids}
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i], _ = s.cfg.Tokenizer.Token(id)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req DetokenizeRequest
	if e := s.decodeRequest(w, r, &req, servedDetokenize); e != nil {
		s.reject(w, e)
		return
	}
	if e := s.checkModel(req.Model); e != nil {
		s.reject(w, e)
		return
	}
	for i, id := range req.Tokens {
		if id < 0 || id >= s.cfg.VocabSize {
			s.reject(w, badRequest("tokens", "tokens[%d] = %d is not a token id; ids run from 0 to %d", i, id, s.cfg.VocabSize-1))
			return
		}
	}
	writeJSON(w, http.StatusOK, DetokenizeResponse{Prompt: s.cfg.Tokenizer.Decode(req.Tokens, true)})
}

// handleTokenizerInfo answers GET /tokenizer_info with what a remote
// tokenizer client (lm-eval's) reads: the special tokens and the sizes.
func (s *Server) handleTokenizerInfo(w http.ResponseWriter, _ *http.Request) {
	tk := s.cfg.Tokenizer
	info := map[string]any{
		"tokenizer_class":  "PreTrainedTokenizerFast",
		"model_max_length": s.cfg.MaxModelLen,
		"vocab_size":       tk.VocabSize(),
		"eos_token":        tk.Decode([]int{tk.EOS()}, false),
		"eos_token_id":     tk.EOS(),
	}
	if tk.BOS() >= 0 {
		info["bos_token"] = tk.Decode([]int{tk.BOS()}, false)
		info["bos_token_id"] = tk.BOS()
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) handleVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.cfg.Version})
}
