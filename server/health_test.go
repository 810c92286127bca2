package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cpmla/cpmla/engine"
)

// failingEngine is the fake engine after its ranks failed: Err reports it
// and Submit refuses, as engine.Engine does.
type failingEngine struct {
	*fakeEngine
	err atomic.Pointer[error]
}

func (f *failingEngine) Err() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *failingEngine) Submit(ctx context.Context, req engine.Request) (<-chan engine.Event, error) {
	if err := f.Err(); err != nil {
		return nil, err
	}
	return f.fakeEngine.Submit(ctx, req)
}

// Once the engine has failed, /health says so with 503 and new requests get
// 503 engine_failed with the engine's error.
func TestFailedEngineIsUnavailable(t *testing.T) {
	var fe *failingEngine
	e := newTestEnv(t, func(f *fakeEngine, c *Config) {
		fe = &failingEngine{fakeEngine: f}
		c.Engine = fe
	})
	get := func() int {
		resp, err := e.hc.Get(e.http.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(); s != http.StatusOK {
		t.Fatalf("/health of a healthy engine: %d", s)
	}
	err := fmt.Errorf("%w: step of 1 tokens, 1 sequences: collective timeout after 2s in group tp[0 1] seq 9 on rank 0: ranks [1] did not arrive", engine.ErrFailed)
	fe.err.Store(&err)
	if s := get(); s != http.StatusServiceUnavailable {
		t.Errorf("/health of a failed engine: %d, want 503", s)
	}
	status, eb, raw := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`)
	if status != http.StatusServiceUnavailable || eb.Error.Code == nil || *eb.Error.Code != "engine_failed" || !strings.Contains(eb.Error.Message, "ranks [1] did not arrive") {
		t.Errorf("request to a failed engine: %d %s", status, raw)
	}
	if !errors.Is(fe.Err(), engine.ErrFailed) {
		t.Fatal("fake error lost")
	}
}
