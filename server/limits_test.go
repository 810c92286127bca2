package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// limitedServer serves a fake engine through the production http.Server
// and listener that `cpmla serve` uses, with limits l.
func limitedServer(t *testing.T, l HTTPLimits, configure func(*fakeEngine)) (*httptest.Server, *fakeEngine, *Server) {
	t.Helper()
	tk := testTokenizer(t)
	fake := newFakeEngine(replyIDs(tk), tk.EOS())
	if configure != nil {
		configure(fake)
	}
	srv, err := New(Config{Engine: fake, Tokenizer: tk, ModelName: testModel, MaxModelLen: testMaxModelLen,
		VocabSize: testVocab, StopTokenIDs: []int{tk.EOS()}, MaxInFlight: 8, HTTP: l})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config = srv.HTTPServer()
	hs.Listener = LimitListener(hs.Listener, srv.cfg.HTTP.MaxConnections)
	hs.Start()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		waitFor(t, "fake engine to finish every request", func() bool { return fake.liveRequests() == 0 })
	})
	return hs, fake, srv
}

func dial(t *testing.T, hs *httptest.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closes c (after any response it
// sends) within d, and what it sent.
func closedWithin(c net.Conn, d time.Duration) (bool, string) {
	c.SetReadDeadline(time.Now().Add(d))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false, string(got)
	}
	return true, string(got)
}

// A client that sends its body a byte at a time is answered 408 once the
// body timeout passes, and its connection is closed.
func TestSlowBodyIsCutOff(t *testing.T) {
	hs, fake, _ := limitedServer(t, HTTPLimits{BodyTimeout: 300 * time.Millisecond}, nil)
	c := dial(t, hs)
	body := `{"prompt":"hello","max_tokens":2}`
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		itoa(len(body))+"\r\n\r\n"+body[:3]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	go func() {
		for i := 3; i < len(body); i++ {
			time.Sleep(100 * time.Millisecond)
			if _, err := io.WriteString(c, body[i:i+1]); err != nil {
				return
			}
		}
	}()
	closed, got := closedWithin(c, 5*time.Second)
	if !closed || !strings.HasPrefix(got, "HTTP/1.1 408") {
		t.Fatalf("after %v: closed %v, response %q; want a 408 and a closed connection", time.Since(start), closed, got)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("the slow body was cut off after %v, want about 300ms", el)
	}
	if n := fake.submittedCount(); n != 0 {
		t.Errorf("%d requests reached the engine", n)
	}
}

// A fast body clears its deadline: a stream that outlives the body timeout
// is not cut by it.
func TestBodyTimeoutDoesNotCutStreams(t *testing.T) {
	hs, _, _ := limitedServer(t, HTTPLimits{BodyTimeout: 200 * time.Millisecond}, func(f *fakeEngine) { f.delay = 60 * time.Millisecond })
	resp, err := http.Post(hs.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"hello","max_tokens":8,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "data: [DONE]") || strings.Contains(string(data), `"error"`) {
		t.Fatalf("stream of ~500ms under a 200ms body timeout: %q", data)
	}
}

// Headers sent slower than the header timeout end the connection.
func TestSlowHeadersAreCutOff(t *testing.T) {
	hs, _, _ := limitedServer(t, HTTPLimits{HeaderTimeout: 300 * time.Millisecond}, nil)
	c := dial(t, hs)
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n")
	start := time.Now()
	if closed, got := closedWithin(c, 5*time.Second); !closed || strings.Contains(got, "200 OK") {
		t.Fatalf("closed %v, response %q: want the connection closed without an answer", closed, got)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("closed after %v, want about 300ms", el)
	}
}

// An idle keep-alive connection is closed after the keep-alive timeout.
func TestIdleKeepAliveIsClosed(t *testing.T) {
	hs, _, _ := limitedServer(t, HTTPLimits{IdleTimeout: 300 * time.Millisecond}, nil)
	c := dial(t, hs)
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read on the idle connection: %v, want EOF", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("closed after %v, want about 300ms", el)
	}
}

// Headers beyond the limit are refused with 431.
func TestOversizedHeadersAreRefused(t *testing.T) {
	hs, _, _ := limitedServer(t, HTTPLimits{}, nil)
	req, _ := http.NewRequest("GET", hs.URL+"/health", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 2*DefaultMaxHeaderBytes))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status %d, want 431", resp.StatusCode)
	}
}

// One connection beyond --max-connections is answered 503 with an OpenAI
// error body; once a connection closes, its slot is free again.
func TestConnectionCap(t *testing.T) {
	hs, _, _ := limitedServer(t, HTTPLimits{MaxConnections: 2, HeaderTimeout: time.Minute}, nil)
	a, b := dial(t, hs), dial(t, hs)
	io.WriteString(a, "GET /health HTTP/1.1\r\nHost: x\r\n")
	io.WriteString(b, "GET /health HTTP/1.1\r\nHost: x\r\n")
	waitFor(t, "both connections to be accepted", func() bool { return hs.Listener.(*LimitedListener).Open() == 2 })
	c := dial(t, hs)
	closed, got := closedWithin(c, 5*time.Second)
	if !closed || !strings.HasPrefix(got, "HTTP/1.1 503") || !strings.Contains(got, `"code":"too_many_connections"`) {
		t.Fatalf("third connection: closed %v, response %q; want 503 too_many_connections", closed, got)
	}
	a.Close()
	waitFor(t, "the closed connection's slot", func() bool { return hs.Listener.(*LimitedListener).Open() == 1 })
	resp, err := http.Get(hs.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after a slot freed: status %d, want 200", resp.StatusCode)
	}
}

// A request still running at --request-timeout is aborted in the engine and
// answered 504, whole or as a stream's error event.
func TestRequestTimeout(t *testing.T) {
	hs, fake, _ := limitedServer(t, HTTPLimits{RequestTimeout: 300 * time.Millisecond}, func(f *fakeEngine) { f.block = true })
	resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(data), "--request-timeout") {
		t.Errorf("status %d body %q, want 504 naming --request-timeout", resp.StatusCode, data)
	}
	waitFor(t, "the engine to see the request cancelled", func() bool { return fake.cancelledCount() == 1 })
}

func itoa(n int) string { return strconv.Itoa(n) }

// A body over the 16 MiB limit is answered 413: at once when its
// Content-Length says so, even if it is sent slower than the body timeout,
// and when read without a declared length once it runs over.
func TestOversizedBodyIsRefused(t *testing.T) {
	t.Run("declared", func(t *testing.T) {
		hs, fake, _ := limitedServer(t, HTTPLimits{BodyTimeout: 300 * time.Millisecond}, nil)
		defer noneSubmitted(t, fake)
		c := dial(t, hs)
		// Only the headers are sent: the answer may not wait for the body.
		if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
			itoa(maxBodyBytes+1)+"\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 413") {
			t.Fatalf("status line %q (%v), want 413 before the body arrives", line, err)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		// The upload must not race the body timeout: on a busy machine 16 MiB
		// through the loopback can take longer than a short one, and the
		// answer would then be 408. The default timeout leaves room.
		hs, fake, _ := limitedServer(t, HTTPLimits{}, nil)
		defer noneSubmitted(t, fake)
		body := io.MultiReader(strings.NewReader(`{"prompt":"`), io.LimitReader(zeros{}, maxBodyBytes), strings.NewReader(`"}`))
		req, err := http.NewRequest(http.MethodPost, hs.URL+"/v1/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("status %d, want 413", resp.StatusCode)
		}
	})
}

func noneSubmitted(t *testing.T, fake *fakeEngine) {
	t.Helper()
	if n := fake.submittedCount(); n != 0 {
		t.Errorf("%d requests reached the engine", n)
	}
}

// zeros reads as an endless run of '0' bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}
