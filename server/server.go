package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cpmla/cpmla/chatparse"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/grammar"
	"github.com/cpmla/cpmla/tokenizer"
)

// Config describes what the server serves and its limits.
type Config struct {
	// Engine runs the requests.
	Engine engine.Submitter
	// Tokenizer encodes prompts, renders chat templates and decodes output.
	Tokenizer *tokenizer.Tokenizer
	// ModelName is the id clients use in "model" (any other name is 404;
	// an empty "model" means this one).
	ModelName string
	// MaxModelLen bounds prompt plus generated tokens per request.
	MaxModelLen int
	// VocabSize bounds token ids in token-id prompts.
	VocabSize int
	// StopTokenIDs end generation unless a request sets ignore_eos (the
	// model's end-of-sequence ids).
	StopTokenIDs []int
	// MaxInFlight bounds the requests submitted to the engine at once; one
	// more is refused with 429. It is the engine's running slots plus the
	// queue allowed to wait for them.
	MaxInFlight int
	// Stats feeds the engine-side metrics; nil leaves them out.
	Stats Stats
	// WriteTimeout bounds each write to a client; a client that reads
	// slower is dropped and its request cancelled. 0 means 30 s.
	WriteTimeout time.Duration
	// Logger receives one line per failed request; nil discards.
	Logger *slog.Logger

	// MaxN bounds a request's n (the engine's --max-num-seqs); 0 means 1.
	MaxN int
	// MaxLogprobs bounds logprobs, top_logprobs and prompt_logprobs
	// (--max-logprobs); 0 allows only the chosen token's logprob.
	MaxLogprobs int
	// APIKey, when set, must be sent as "Authorization: Bearer KEY" on
	// every /v1 route (compared in constant time).
	APIKey string
	// CORS is the cross-origin policy; the zero value sends no CORS headers.
	CORS CORS
	// MetricsPrefix prefixes every metric name; "" means "vllm:".
	MetricsPrefix string
	// Version is what GET /version reports.
	Version string
	// ToolCallParser and ReasoningParser name chatparse's parsers (vLLM's
	// --tool-call-parser and --reasoning-parser); AutoToolChoice is
	// --enable-auto-tool-choice, without which tool_choice "auto" is refused.
	ToolCallParser, ReasoningParser string
	AutoToolChoice                  bool
	// HTTP bounds what one client may hold (zero fields: the defaults).
	HTTP HTTPLimits
	// PromptWorkers bounds the requests whose prompts are rendered and
	// tokenized at once (--tokenizer-pool-size); 0 means half the cores,
	// at least one.
	PromptWorkers int
}

// maxBodyBytes bounds a request body.
const maxBodyBytes = 16 << 20

// Server is an http.Handler serving the OpenAI API for one model.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	metrics *metrics
	slots   chan struct{}
	prompts *promptPool
	created int64
	// grammars compiles structured-output constraints over the model's
	// vocabulary (built on the first such request).
	grammars *grammar.Compiler
}

// New checks cfg and returns a server.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Engine == nil:
		return nil, errors.New("server: Config.Engine is nil; pass the engine that runs requests")
	case cfg.Tokenizer == nil:
		return nil, errors.New("server: Config.Tokenizer is nil; pass tokenizer.Default() or the checkpoint's tokenizer")
	case cfg.ModelName == "":
		return nil, errors.New("server: Config.ModelName is empty; name the served model (e.g. the preset name)")
	case cfg.MaxModelLen < 2:
		return nil, fmt.Errorf("server: max model len %d leaves no room for a prompt and one generated token; use at least 2", cfg.MaxModelLen)
	case cfg.VocabSize < 1:
		return nil, fmt.Errorf("server: vocab size %d must be positive (the model's vocab_size)", cfg.VocabSize)
	case cfg.MaxInFlight < 1:
		return nil, fmt.Errorf("server: max in-flight requests %d must be at least 1 (max-num-seqs plus --max-queue)", cfg.MaxInFlight)
	case cfg.MaxLogprobs < 0:
		return nil, fmt.Errorf("server: --max-logprobs %d must be ≥ 0; vLLM's default is 20", cfg.MaxLogprobs)
	}
	if err := chatparse.CheckToolParser(cfg.ToolCallParser); err != nil {
		return nil, fmt.Errorf("server: --tool-call-parser: %w", err)
	}
	if err := chatparse.CheckReasoningParser(cfg.ReasoningParser); err != nil {
		return nil, fmt.Errorf("server: --reasoning-parser: %w", err)
	}
	if cfg.AutoToolChoice && cfg.ToolCallParser == "" {
		return nil, errors.New("server: --enable-auto-tool-choice needs --tool-call-parser; use one of " + strings.Join(chatparse.ToolParsers(), ", "))
	}
	cfg.MaxN = max(cfg.MaxN, 1)
	if cfg.MetricsPrefix == "" {
		cfg.MetricsPrefix = "vllm:"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	cfg.HTTP = cfg.HTTP.WithDefaults()
	if cfg.PromptWorkers == 0 {
		cfg.PromptWorkers = max(1, runtime.NumCPU()/2)
	}
	if cfg.PromptWorkers < 0 || cfg.PromptWorkers > 1024 {
		return nil, fmt.Errorf("server: --tokenizer-pool-size %d must be in [1, 1024]", cfg.PromptWorkers)
	}
	if err := cfg.HTTP.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:     cfg,
		mux:     http.NewServeMux(),
		metrics: newMetrics(cfg.MetricsPrefix, cfg.ModelName, cfg.MaxModelLen, cfg.Stats),
		slots:   make(chan struct{}, cfg.MaxInFlight),
		prompts: newPromptPool(cfg.PromptWorkers),
		created: time.Now().Unix(),
		grammars: grammar.NewCompiler(func() (*grammar.Vocab, error) { return grammar.SharedVocab(cfg.Tokenizer, cfg.VocabSize) },
			grammar.DefaultLimits(), keptGrammarBytes),
	}
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletion)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.HandleFunc("GET /version", s.handleVersion)
	s.mux.HandleFunc("POST /tokenize", s.handleTokenize)
	s.mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	s.mux.HandleFunc("GET /tokenizer_info", s.handleTokenizerInfo)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
			msg: fmt.Sprintf("no route %s %s; the server answers POST /v1/chat/completions, POST /v1/completions, GET /v1/models, POST /tokenize, POST /detokenize, GET /tokenizer_info, GET /version, GET /health and GET /metrics", r.Method, r.URL.Path)})
	})
	return s, nil
}

// ServeHTTP implements http.Handler: CORS, then the API key on /v1 routes,
// then the routes. A request's body must arrive within HTTP.BodyTimeout of
// its headers, and a request ends by HTTP.RequestTimeout.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.CORS.handle(w, r) {
		return
	}
	if !s.authorized(r) {
		writeError(w, &apiError{status: http.StatusUnauthorized, typ: "authentication_error", code: "invalid_api_key",
			msg: "missing or wrong API key; send the server's key (--api-key or VLLM_API_KEY) as \"Authorization: Bearer KEY\""})
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(s.cfg.HTTP.BodyTimeout)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
	}
	if r.Method == http.MethodPost && s.cfg.HTTP.RequestTimeout > 0 {
		ctx, cancel := context.WithTimeoutCause(r.Context(), s.cfg.HTTP.RequestTimeout, errRequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	s.mux.ServeHTTP(w, r)
}

// errRequestTimeout is the cause of a request context that reached
// HTTP.RequestTimeout.
var errRequestTimeout = errors.New("request timeout")

// deadlineBody lifts the body's read deadline once the body has been read
// whole, so that the connection's read afterwards (the server's watch for
// a client that goes away during a long stream) has none.
type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// InFlight is the number of requests currently admitted.
func (s *Server) InFlight() int { return len(s.slots) }

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, ModelList{Object: "list", Data: []ModelCard{{
		ID: s.cfg.ModelName, Object: "model", Created: s.created, OwnedBy: "cpmla",
		Root: s.cfg.ModelName, MaxModelLen: s.cfg.MaxModelLen, VocabSize: s.cfg.VocabSize,
	}}})
}

// failer is implemented by an engine that can fail as a whole
// (engine.Engine after a failed step).
type failer interface{ Err() error }

// handleHealth answers 200 while the engine serves and 503 with its error
// once it has failed, so a load balancer stops sending requests.
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if f, ok := s.cfg.Engine.(failer); ok {
		if err := f.Err(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "error": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// admit takes k admission slots without waiting, all or none.
func (s *Server) admit(k int) bool {
	for i := range k {
		select {
		case s.slots <- struct{}{}:
		default:
			s.release(i)
			return false
		}
	}
	return true
}

func (s *Server) release(k int) {
	for range k {
		<-s.slots
	}
}

// apiError is a refusal with its HTTP status and OpenAI error fields.
type apiError struct {
	status int
	typ    string
	msg    string
	param  string
	code   string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, msg: fmt.Sprintf(format, args...)}
}

func (e *apiError) body() ErrorBody {
	d := ErrorDetail{Message: e.msg, Type: e.typ}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.code != "" {
		d.Code = &e.code
	}
	return ErrorBody{Error: d}
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":{"message":"encode response","type":"server_error","param":null,"code":null}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
