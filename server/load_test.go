package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"go.uber.org/goleak"
)

// TestLoadWithDisconnects drives the server from several clients at once
// over loopback; about a third of the clients go away in the middle of
// their stream. Afterwards no request may be left in the engine, no
// admission slot held and no goroutine leaked, and the gauges are back at
// zero.
func TestLoadWithDisconnects(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs after the server is closed
	const (
		workers     = 8
		perWorker   = 12
		maxInFlight = 6 // below the client concurrency: some requests get 429
	)
	e := newTestEnv(t, func(f *fakeEngine, c *Config) {
		f.delay = 200 * time.Microsecond
		c.MaxInFlight = maxInFlight
	})
	var (
		mu                               sync.Mutex
		completed, disconnected, tooMany int
		other                            []error
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range perWorker {
				ctx, cancel := context.WithCancel(context.Background())
				dropAfter := -1 // chunks to read before going away
				if rng.IntN(3) == 0 {
					dropAfter = rng.IntN(6)
				}
				p := chatParams(int64(1 + rng.IntN(12)))
				var err error
				if dropAfter < 0 && rng.IntN(2) == 0 {
					_, err = e.client.Chat.Completions.New(ctx, p)
				} else {
					s := e.client.Chat.Completions.NewStreaming(ctx, p)
					for n := 0; s.Next(); n++ {
						if n == dropAfter {
							cancel()
							break
						}
					}
					err = s.Err()
					s.Close()
				}
				cancel()
				var apiErr *openai.Error
				mu.Lock()
				switch {
				case dropAfter >= 0:
					disconnected++
				case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests:
					tooMany++
				case err != nil:
					other = append(other, err)
				default:
					completed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d unexpected errors, first: %v", len(other), other[0])
	}
	if completed == 0 || disconnected == 0 {
		t.Errorf("completed %d, disconnected %d: the load should exercise both", completed, disconnected)
	}
	t.Logf("completed %d, disconnected %d, refused with 429: %d", completed, disconnected, tooMany)
	waitFor(t, "engine and server to drain", func() bool { return e.fake.liveRequests() == 0 && e.srv.InFlight() == 0 })
	fams := e.scrape(t)
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running"} {
		if v := fams[name].GetMetric()[0].GetGauge().GetValue(); v != 0 {
			t.Errorf("%s = %v after the load, want 0", name, v)
		}
	}
}
