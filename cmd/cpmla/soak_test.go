package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// soakDuration is how long the soak test drives the server: 15 s in
// go test ./... (CI), longer with CPMLA_SOAK=2m.
func soakDuration(t *testing.T) time.Duration {
	if v := os.Getenv("CPMLA_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CPMLA_SOAK=%q: %v", v, err)
		}
		return d
	}
	return 15 * time.Second
}

// soakRSSBound is how much the process's resident memory may grow over the
// soak, measured after the server is warm and once every request has
// ended and the garbage is returned.
const soakRSSBound = 256 << 20

// rss is this process's resident set size.
func rss(t *testing.T) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status: RSS cannot be measured here")
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// soakClient is one kind of traffic; run sends one request and reports a
// wrong answer as an error.
type soakClient struct {
	name string
	run  func(ctx context.Context) error
}

// The server under mixed load for a bounded time: greedy completions and
// chats, whole and streamed, checked against answers taken alone before the
// load; streams cancelled midway; prompts far over --max-model-len and
// bodies over the limit; malformed bodies; bodies sent slower than the body
// timeout; slow readers; idle keep-alive connections. Afterwards no
// goroutine, KV block, admission slot or connection is left, resident
// memory is within soakRSSBound of where it started, and every well-formed
// request got the answer it gets alone.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the server for a while")
	}
	// Registered first, so it runs last: after the server's own clean-up.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	// The body timeout cuts the slow-body clients off in seconds, and still
	// lets the 15 MB over-length prompt arrive on two cores busy with
	// other test packages (at 1 s it was cut off there: 408, not 400).
	s := startOn(t, tinyCheckpointWithVocab(t, 129280), "--http-body-timeout", "3s", "--max-num-seqs", "8", "--max-queue", "64",
		"--max-num-batched-tokens", "128", "--max-model-len", "256")
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	defer tr.CloseIdleConnections()

	post := func(ctx context.Context, path, body string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", s.URL+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return hc.Do(req)
	}
	// completion returns the text of a whole greedy completion.
	completion := func(ctx context.Context, path, body string) (string, error) {
		resp, err := post(ctx, path, body)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: status %d: %s", path, resp.StatusCode, raw)
		}
		var out struct {
			Choices []struct {
				Text    string `json:"text"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
			return "", fmt.Errorf("%s: malformed answer %s", path, raw)
		}
		return out.Choices[0].Text + out.Choices[0].Message.Content, nil
	}
	// streamed returns the text of a streamed greedy completion.
	streamed := func(ctx context.Context, path, body string) (string, error) {
		resp, err := post(ctx, path, body)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			raw, _ := io.ReadAll(resp.Body)
			return "", fmt.Errorf("%s stream: status %d: %s", path, resp.StatusCode, raw)
		}
		var text strings.Builder
		sc := bufio.NewScanner(resp.Body)
		done := false
		for sc.Scan() {
			l, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if l == "[DONE]" {
				done = true
				break
			}
			var ch struct {
				Choices []struct {
					Text  string `json:"text"`
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
				Error any `json:"error"`
			}
			if err := json.Unmarshal([]byte(l), &ch); err != nil || ch.Error != nil {
				return "", fmt.Errorf("%s stream: bad event %q", path, l)
			}
			for _, c := range ch.Choices {
				text.WriteString(c.Text + c.Delta.Content)
			}
		}
		if !done {
			return "", fmt.Errorf("%s stream ended without [DONE]: %v", path, sc.Err())
		}
		return text.String(), nil
	}

	// Well-formed requests and their answers alone.
	type job struct{ path, whole, stream string }
	var jobs []job
	for i := range 4 {
		ids := make([]string, 5+7*i)
		for k := range ids {
			ids[k] = strconv.Itoa(100 + 37*k + i)
		}
		p := `"prompt":[` + strings.Join(ids, ",") + `],"max_tokens":` + strconv.Itoa(8+4*i) + `,"temperature":0,"ignore_eos":true`
		jobs = append(jobs, job{"/v1/completions", "{" + p + "}", "{" + p + `,"stream":true}`})
		m := fmt.Sprintf(`"messages":[{"role":"user","content":"question %d: what comes next?"}],"max_tokens":%d,"temperature":0,"ignore_eos":true`, i, 6+3*i)
		jobs = append(jobs, job{"/v1/chat/completions", "{" + m + "}", "{" + m + `,"stream":true}`})
	}
	want := make([]string, len(jobs))
	for i, j := range jobs {
		var err error
		if want[i], err = completion(context.Background(), j.path, j.whole); err != nil {
			t.Fatal(err)
		}
	}
	tr.CloseIdleConnections()
	runtime.GC()
	debug.FreeOSMemory()
	rssStart := rss(t)

	huge := strings.Repeat("word ", 3<<20)                     // 15 MB, far over --max-model-len
	over := `{"prompt":"` + strings.Repeat("x", 17<<20) + `"}` // over the 16 MiB body limit
	status := func(ctx context.Context, path, body string, want int) error {
		resp, err := post(ctx, path, body)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("%s: status %d, want %d", path, resp.StatusCode, want)
		}
		return nil
	}
	clients := []soakClient{
		{"whole", func(ctx context.Context) error {
			i := rand.IntN(len(jobs))
			got, err := completion(ctx, jobs[i].path, jobs[i].whole)
			if err == nil && got != want[i] {
				err = fmt.Errorf("%s answered %q under load, %q alone", jobs[i].path, got, want[i])
			}
			return err
		}},
		{"stream", func(ctx context.Context) error {
			i := rand.IntN(len(jobs))
			got, err := streamed(ctx, jobs[i].path, jobs[i].stream)
			if err == nil && got != want[i] {
				err = fmt.Errorf("%s streamed %q under load, %q alone", jobs[i].path, got, want[i])
			}
			return err
		}},
		{"cancelled stream", func(ctx context.Context) error {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			resp, err := post(cctx, "/v1/completions", `{"prompt":[1,2,3],"max_tokens":200,"ignore_eos":true,"stream":true}`)
			if err != nil {
				return nil // cancelled before it was sent
			}
			br := bufio.NewReader(resp.Body)
			for range 3 {
				if _, err := br.ReadString('\n'); err != nil {
					break
				}
			}
			cancel()
			resp.Body.Close()
			return nil
		}},
		{"prompt over max-model-len", func(ctx context.Context) error {
			return status(ctx, "/v1/completions", `{"prompt":"`+huge+`"}`, http.StatusBadRequest)
		}},
		{"body over the limit", func(ctx context.Context) error {
			return status(ctx, "/v1/completions", over, http.StatusRequestEntityTooLarge)
		}},
		{"malformed", func(ctx context.Context) error {
			bodies := []string{`{"prompt":`, `[1,2]`, `{"prompt":"hi","max_tokens":"5"}`, `{"messages":{"role":1}}`, "\x00\xff"}
			path := []string{"/v1/completions", "/v1/chat/completions"}[rand.IntN(2)]
			return status(ctx, path, bodies[rand.IntN(len(bodies))], http.StatusBadRequest)
		}},
		{"slow body", func(ctx context.Context) error {
			c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
			if err != nil {
				return err
			}
			defer c.Close()
			body := `{"prompt":"hello","max_tokens":2}`
			fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:2])
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return fmt.Errorf("slow body: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				return fmt.Errorf("slow body: status %d, want 408", resp.StatusCode)
			}
			return nil
		}},
		{"slow reader", func(ctx context.Context) error {
			resp, err := post(ctx, "/v1/completions", `{"prompt":[5,6,7],"max_tokens":12,"ignore_eos":true,"stream":true}`)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			buf := make([]byte, 64)
			for {
				time.Sleep(20 * time.Millisecond)
				if _, err := resp.Body.Read(buf); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
			}
		}},
		{"idle keep-alive", func(ctx context.Context) error {
			c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != io.EOF { // the keep-alive timeout closes it
				return fmt.Errorf("idle connection: %v, want EOF", err)
			}
			return nil
		}},
	}

	ctx, cancel := context.WithTimeout(context.Background(), soakDuration(t))
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	var failures atomic.Int64
	// Well-formed requests are most of the load; every other kind keeps
	// coming throughout.
	weights := map[string]int{"whole": 6, "stream": 6, "cancelled stream": 2}
	var pick []soakClient
	for _, c := range clients {
		for range max(weights[c.name], 1) {
			pick = append(pick, c)
		}
	}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c := pick[rand.IntN(len(pick))]
				err := c.run(ctx)
				if ctx.Err() != nil {
					return // the soak ended under it
				}
				if err != nil && failures.Add(1) <= 10 {
					t.Errorf("%s: %v", c.name, err)
				}
				mu.Lock()
				counts[c.name]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	tr.CloseIdleConnections()

	// Nothing stays held.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.engine.Stats()
		open := s.conns.Open()
		if st.KVBlocksInUse == 0 && st.Running == 0 && st.Waiting == 0 && open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the soak: %d KV blocks held, %d running, %d waiting, %d connections open", st.KVBlocksInUse, st.Running, st.Waiting, open)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runtime.GC()
	debug.FreeOSMemory()
	rssEnd := rss(t)
	var total int
	for _, n := range counts {
		total += n
	}
	t.Logf("%d requests in %v: %v; RSS %d MiB at the start, %d MiB at the end", total, soakDuration(t), counts, rssStart>>20, rssEnd>>20)
	if rssEnd-rssStart > soakRSSBound {
		t.Errorf("RSS grew from %d to %d MiB over the soak, more than %d MiB", rssStart>>20, rssEnd>>20, soakRSSBound>>20)
	}
	for _, c := range clients {
		if counts[c.name] == 0 {
			t.Errorf("no %s request completed during the soak", c.name)
		}
	}
	if err := s.close(5 * time.Second); err != nil {
		t.Errorf("close: %v", err)
	}
}
