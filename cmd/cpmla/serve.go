package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/chatparse"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/server"
	"github.com/cpmla/cpmla/tokenizer"
)

func init() { register(newServeCmd) }

type serveOptions struct {
	engineFlags

	host       string
	port       int
	servedName string
	tokenizer  string

	maxQueue      int
	http          server.HTTPLimits
	promptWorkers int

	maxLogprobs                             int
	apiKey                                  string
	allowedOrigins, allowedMethods, allowed []string
	allowCredentials                        bool
	metricsPrefix                           string

	chatTemplate, toolParser, reasoningParser string
	autoToolChoice                            bool
}

// engineOptions turns the flags into engine options, refusing impossible
// values before any weight loads.
func (o *serveOptions) engineOptions(cfg *config.Model) (engine.Options, error) {
	if o.maxQueue < 0 || o.maxQueue > maxQueue {
		return o.engine, fmt.Errorf("--max-queue is %d; use 0 (no waiting beyond --max-num-seqs) up to %d", o.maxQueue, maxQueue)
	}
	eo, err := o.engineFlags.engineOptions()
	if err != nil {
		return eo, err
	}
	eo = eo.WithDefaults(cfg)
	// The server admits max-num-seqs + max-queue requests; the engine's own
	// queue must never be the first to refuse.
	eo.MaxQueue = max(eo.MaxNumSeqs+o.maxQueue, 1)
	return eo, eo.Validate(cfg)
}

// engineFailureGrace is how long serve answers 503 after its engine failed
// (and a follower rank lingers after its collectives failed) before the
// process ends.
const engineFailureGrace = 5 * time.Second

// maxQueue bounds --max-queue: the requests waiting for a running slot.
const maxQueue = 1 << 20

// preflight checks every flag and the memory the start-up needs before
// anything is loaded or bound, and returns the model config and the engine
// options.
func (o *serveOptions) preflight() (*config.Model, engine.Options, error) {
	if err := checkListenAddress(o.host, o.port); err != nil {
		return nil, engine.Options{}, err
	}
	if err := o.checkHTTP(); err != nil {
		return nil, engine.Options{}, err
	}
	return o.engineFlags.preflight(o.engineOptions)
}

// checkHTTP refuses HTTP limits that would disable a bound (a zero or
// negative timeout) or make no sense; --request-timeout 0 means none.
func (o *serveOptions) checkHTTP() error {
	l := o.http
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--http-header-timeout", l.HeaderTimeout}, {"--http-body-timeout", l.BodyTimeout}, {"--http-keep-alive-timeout", l.IdleTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s %v must be positive: without it one client can hold a connection as long as it likes", d.flag, d.v)
		}
	}
	if l.RequestTimeout < 0 {
		return fmt.Errorf("--request-timeout %v must be ≥ 0 (0: no deadline)", l.RequestTimeout)
	}
	if o.promptWorkers < 1 || o.promptWorkers > 1024 {
		return fmt.Errorf("--tokenizer-pool-size %d must be in [1, 1024]", o.promptWorkers)
	}
	if l.MaxHeaderBytes < 1 || l.MaxConnections < 1 {
		return fmt.Errorf("--http-max-header-bytes %d and --max-connections %d must be at least 1", l.MaxHeaderBytes, l.MaxConnections)
	}
	return l.Validate()
}

// limits are the HTTP limits the server runs with (--request-timeout 0:
// no deadline).
func (o *serveOptions) limits() server.HTTPLimits {
	l := o.http
	if l.RequestTimeout == 0 {
		l.RequestTimeout = -1
	}
	return l
}

// checkListenAddress refuses a --host that is neither an IP address nor a
// name that resolves, and a --port outside 0..65535, before the engine is
// built.
func checkListenAddress(host string, port int) error {
	if port < 0 || port > 65535 {
		return fmt.Errorf("--port is %d; use 1..65535, or 0 for any free port", port)
	}
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	if _, err := net.LookupHost(host); err != nil {
		return fmt.Errorf("--host %q is neither an IP address nor a host name that resolves (%v); use 127.0.0.1, 0.0.0.0 or a name of this host", host, err)
	}
	return nil
}

// startedServer is a running `cpmla serve`.
type startedServer struct {
	URL     string
	name    string // the served model name
	http    *http.Server
	engine  *engine.Engine
	conns   *server.LimitedListener
	closers []func()

	closeOnce sync.Once
	closeErr  error
}

// close stops accepting, waits up to grace for streams to end, then stops
// the engine and frees the model.
func (s *startedServer) close(grace time.Duration) error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		s.closeErr = s.http.Shutdown(ctx)
		if errors.Is(s.closeErr, context.DeadlineExceeded) {
			s.closeErr = s.http.Close()
		}
		s.engine.Close()
		for i := len(s.closers) - 1; i >= 0; i-- {
			s.closers[i]()
		}
	})
	return s.closeErr
}

// startServe builds the engine and the server and starts listening; the
// memory table goes to stderr.
func startServe(o serveOptions, stderr io.Writer) (*startedServer, error) {
	_, eo, err := o.preflight()
	if err != nil {
		return nil, err
	}
	if err := chatparse.CheckToolParser(o.toolParser); err != nil {
		return nil, fmt.Errorf("--tool-call-parser: %w", err)
	}
	if err := chatparse.CheckReasoningParser(o.reasoningParser); err != nil {
		return nil, fmt.Errorf("--reasoning-parser: %w", err)
	}
	if o.autoToolChoice && o.toolParser == "" {
		return nil, fmt.Errorf("--enable-auto-tool-choice needs --tool-call-parser (one of %s)", strings.Join(chatparse.ToolParsers(), ", "))
	}
	tk, err := loadTokenizer(o.tokenizer, o.model)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	if o.chatTemplate != "" {
		src, err := tokenizer.LoadChatTemplate(o.chatTemplate)
		if err != nil {
			return nil, fmt.Errorf("--chat-template: %w", err)
		}
		if tk, err = tk.WithChatTemplate(src); err != nil {
			return nil, fmt.Errorf("--chat-template: %w", err)
		}
	}
	// Bind before the engine is built, so that a port in use is refused at once.
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (choose another --port, or 0 for any free one)", net.JoinHostPort(o.host, strconv.Itoa(o.port)), err)
	}
	built, err := o.buildRanks(eo.BlockSize)
	if err != nil {
		ln.Close()
		return nil, err
	}
	cfg, factory, weights := built.cfg, built.factory, built.weights
	s := &startedServer{closers: []func(){func() { ln.Close() }, built.release}}
	fail := func(err error) (*startedServer, error) {
		for i := len(s.closers) - 1; i >= 0; i-- {
			s.closers[i]()
		}
		return nil, err
	}
	e, err := engine.New(cfg, weights, factory, eo)
	if err != nil {
		return fail(err)
	}
	s.engine = e
	if err := e.Memory().WriteTable(stderr); err != nil {
		e.Close()
		return fail(err)
	}
	name := o.servedName
	if name == "" {
		name = o.model
	}
	for _, l := range []*[]string{&o.allowedOrigins, &o.allowedMethods, &o.allowed} {
		if *l, err = jsonOrList(*l); err != nil {
			e.Close()
			return fail(err)
		}
	}
	apiKey := o.apiKey
	if apiKey == "" {
		apiKey = os.Getenv("VLLM_API_KEY")
	}
	srv, err := server.New(server.Config{
		Engine: e, Tokenizer: tk, ModelName: name, MaxModelLen: eo.MaxModelLen, VocabSize: cfg.VocabSize,
		StopTokenIDs: cfg.EOSTokenIDs, MaxInFlight: eo.MaxNumSeqs + o.maxQueue, Stats: server.EngineStats(e, o.tp*o.pcp),
		Logger: slog.New(slog.NewTextHandler(stderr, nil)),
		MaxN:   eo.MaxNumSeqs, MaxLogprobs: o.maxLogprobs, APIKey: apiKey, MetricsPrefix: o.metricsPrefix, Version: version(),
		CORS:           server.CORS{Origins: o.allowedOrigins, Methods: o.allowedMethods, Headers: o.allowed, Credentials: o.allowCredentials},
		ToolCallParser: o.toolParser, ReasoningParser: o.reasoningParser, AutoToolChoice: o.autoToolChoice,
		HTTP: o.limits(), PromptWorkers: o.promptWorkers,
	})
	if err != nil {
		e.Close()
		return fail(err)
	}
	s.http = srv.HTTPServer()
	s.URL = "http://" + ln.Addr().String()
	s.name = name
	s.conns = server.LimitListener(ln, o.limits().WithDefaults().MaxConnections)
	go s.http.Serve(s.conns)
	return s, nil
}

// startupLine is what serve prints once it listens: the URL and the model
// name clients send.
func startupLine(s *startedServer, model string) string {
	return fmt.Sprintf("cpmla serve: %s (model %q served as %q; try %s/v1/models)", s.URL, model, s.name, s.URL)
}

// jsonOrList reads a list flag given as vLLM writes it (a JSON list, such
// as '["*"]') or as comma-separated words.
func jsonOrList(v []string) ([]string, error) {
	joined := strings.Join(v, ",")
	if !strings.HasPrefix(strings.TrimSpace(joined), "[") {
		var out []string
		for _, w := range strings.Split(joined, ",") {
			if w = strings.TrimSpace(w); w != "" {
				out = append(out, w)
			}
		}
		return out, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(joined), &out); err != nil {
		return nil, fmt.Errorf("list flag %s is neither a JSON list of strings nor comma-separated words: %w", joined, err)
	}
	return out, nil
}

func newServeCmd() *cobra.Command {
	o := serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the OpenAI API (chat and completions, streaming, /metrics) on in-process ranks",
		Long: "Start the engine on the model (the built-in trained " + defaultModel + " by default) and serve\n" +
			"POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health and GET /metrics.\n" +
			"At most --max-num-seqs + --max-queue requests are in flight; more get 429. Ctrl-C stops it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := o.preflight(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runRanks(o.threadsPerRank, o.deployment(), cmd.ErrOrStderr(),
				func(procs *engine.Procs, procWeights int64) error {
					o.procs, o.procWeights = procs, procWeights
					s, err := startServe(o, cmd.ErrOrStderr())
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), startupLine(s, o.model))
					select {
					case <-ctx.Done():
						fmt.Fprintln(cmd.ErrOrStderr(), "cpmla serve: shutting down")
						return s.close(10 * time.Second)
					case <-s.engine.Failed():
						// New requests get 503 and /health 503 for a while, so
						// that clients and load balancers see why; then the
						// process (and under MPI the job) ends with the error.
						err := s.engine.Err()
						fmt.Fprintf(cmd.ErrOrStderr(), "cpmla serve: %v; answering 503 for %v, then stopping\n", err, engineFailureGrace)
						time.Sleep(engineFailureGrace)
						s.close(time.Second)
						return err
					}
				})
		},
	}
	addServeFlags(cmd, &o)
	return cmd
}

// addServeFlags defines serve's flags on cmd, bound to o.
func addServeFlags(cmd *cobra.Command, o *serveOptions) {
	f := cmd.Flags()
	f.StringVar(&o.host, "host", "127.0.0.1", "address to listen on")
	f.IntVar(&o.port, "port", 8000, "port to listen on (0: any free port)")
	o.addEngineFlags(cmd, defaultModel)
	f.StringVar(&o.servedName, "served-model-name", "", "model id clients use (default: --model)")
	f.StringVar(&o.tokenizer, "tokenizer", "", "directory with tokenizer.json (default: the checkpoint's, else the embedded DeepSeek-V3 tokenizer)")
	f.IntVar(&o.maxQueue, "max-queue", 256, "requests allowed to wait beyond --max-num-seqs; more get 429")
	addSpeculativeFlag(f, &o.speculative)
	f.IntVar(&o.engine.MaxNumSeqs, "max-num-seqs", engine.DefaultMaxNumSeqs, "sequences per step")
	f.IntVar(&o.engine.MaxModelLen, "max-model-len", 0, "longest request in tokens, prompt plus output (0: the model's max_position_embeddings)")
	f.BoolVar(&o.engine.DisablePrefixCaching, "no-prefix-caching", false, "do not reuse cached full blocks")
	f.IntVar(&o.engine.MaxPromptLogitRows, "max-prompt-logit-rows", engine.DefaultMaxPromptLogitRows, "logit rows per step for prompt logprobs and echo (each vocab_size × 4 bytes, allocated at start-up; -1: none, such requests are refused)")
	f.IntVar(&o.maxLogprobs, "max-logprobs", 20, "most logprobs, top_logprobs and prompt_logprobs a request may ask for")
	f.StringVar(&o.apiKey, "api-key", "", "require \"Authorization: Bearer KEY\" on every /v1 route (default: $VLLM_API_KEY)")
	f.StringArrayVar(&o.allowedOrigins, "allowed-origins", []string{"*"}, "CORS origins allowed (comma-separated or a JSON list; * allows any)")
	f.StringArrayVar(&o.allowedMethods, "allowed-methods", []string{"*"}, "CORS methods allowed")
	f.StringArrayVar(&o.allowed, "allowed-headers", []string{"*"}, "CORS request headers allowed")
	f.BoolVar(&o.allowCredentials, "allow-credentials", false, "CORS: allow credentials")
	f.StringVar(&o.metricsPrefix, "metrics-prefix", "vllm:", "prefix of every /metrics name (cpmla: for the names before vLLM's)")
	f.StringVar(&o.chatTemplate, "chat-template", "", "chat template file (or the template itself) replacing the tokenizer's")
	f.BoolVar(&o.autoToolChoice, "enable-auto-tool-choice", false, "parse tool calls out of chat output for requests with tools (tool_choice auto); needs --tool-call-parser")
	f.StringVar(&o.toolParser, "tool-call-parser", "", "tool-call format: "+strings.Join(chatparse.ToolParsers(), ", "))
	f.StringVar(&o.reasoningParser, "reasoning-parser", "", "split reasoning_content out of chat output: "+strings.Join(chatparse.ReasoningParsers(), ", "))
	f.DurationVar(&o.http.HeaderTimeout, "http-header-timeout", server.DefaultHeaderTimeout, "time a client has to send a request's headers")
	f.DurationVar(&o.http.BodyTimeout, "http-body-timeout", server.DefaultBodyTimeout, "time a client has to send a request's body after its headers")
	f.DurationVar(&o.http.IdleTimeout, "http-keep-alive-timeout", server.DefaultIdleTimeout, "an idle keep-alive connection is closed after this long (uvicorn's and vLLM's 5 s)")
	sizeIntVar(f, &o.http.MaxHeaderBytes, "http-max-header-bytes", server.DefaultMaxHeaderBytes, "largest request line and headers, e.g. 16KiB (uvicorn's h11 limit)")
	f.IntVar(&o.http.MaxConnections, "max-connections", server.DefaultMaxConnections, "open connections at once; one more is answered 503")
	f.IntVar(&o.promptWorkers, "tokenizer-pool-size", max(1, runtime.NumCPU()/2), "requests whose prompts are rendered and tokenized at once (the others wait; the engine keeps the other cores)")
	f.DurationVar(&o.http.RequestTimeout, "request-timeout", server.DefaultRequestTimeout, "a generation request still running after this long is aborted and answered 504 (0: no deadline)")
}
