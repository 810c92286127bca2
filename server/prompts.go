package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/cpmla/cpmla/tokenizer"
)

// promptPool bounds the requests whose prompts are rendered and tokenized at
// once, so that clients sending huge prompts share a fixed number of cores
// and the engine's step loop keeps the rest.
type promptPool struct {
	slots chan struct{}
	// freeing is set while a return of memory to the OS is pending.
	freeing atomic.Bool
}

func newPromptPool(workers int) *promptPool {
	return &promptPool{slots: make(chan struct{}, workers)}
}

// prepare waits for a slot to render and tokenize a request's prompts; the
// caller runs release when done. A request whose client goes away, or
// whose deadline passes, while it waits is refused.
func (s *Server) prepare(ctx context.Context) (release func(), e *apiError) {
	select {
	case s.prompts.slots <- struct{}{}:
		return func() { <-s.prompts.slots }, nil
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), errRequestTimeout) {
			return nil, &apiError{status: http.StatusGatewayTimeout, typ: "server_error", code: "request_timeout",
				msg: fmt.Sprintf("the request waited longer than the server's --request-timeout %v for its prompt to be tokenized; retry later", s.cfg.HTTP.RequestTimeout)}
		}
		return nil, &apiError{status: http.StatusServiceUnavailable, typ: "server_error", msg: "request cancelled while waiting for its prompt to be tokenized"}
	}
}

// encodeText tokenizes a text prompt for the prompt field param, stopping
// as soon as it provably has more tokens than --max-model-len allows (the
// rest of the text is never tokenized). With truncate > 0 the whole text is
// tokenized: only its last truncate tokens are kept.
func (s *Server) encodeText(param, text string, opts tokenizer.EncodeOptions, truncate int) ([]int, *apiError) {
	if truncate > 0 {
		return s.cfg.Tokenizer.EncodeWith(text, opts), nil
	}
	ids, err := s.cfg.Tokenizer.EncodeLimited(text, opts, s.cfg.MaxModelLen)
	if errors.Is(err, tokenizer.ErrTooManyTokens) {
		return nil, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, code: "context_length_exceeded",
			msg: fmt.Sprintf("the prompt has more tokens than the maximum model length (--max-model-len) %d (%v); shorten the prompt to at most %d tokens or start the server with a larger --max-model-len",
				s.cfg.MaxModelLen, err, s.cfg.MaxModelLen-1)}
	}
	if err != nil {
		return nil, badRequest(param, "tokenize the prompt: %v", err)
	}
	return ids, nil
}

// bigBody is the body size past which a request's garbage is worth giving
// back to the operating system once the request is done.
const bigBody = 1 << 20

// afterBigBody returns the memory a large request left behind to the
// operating system about a second after it, at most once a second, so that
// a burst of large prompts does not leave the process at its peak size.
func (s *Server) afterBigBody(n int) {
	if n < bigBody || !s.prompts.freeing.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(time.Second, func() {
		debug.FreeOSMemory()
		s.prompts.freeing.Store(false)
	})
}
