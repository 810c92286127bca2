package server

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// HTTPLimits bound what one client may hold of the server: time to send
// its headers and body, an idle keep-alive connection, the header size,
// open connections and the whole life of a generation request. The
// defaults follow what vLLM's uvicorn front end does where it bounds
// something (keep-alive 5 s, headers 16 KiB) and bound the rest.
type HTTPLimits struct {
	// HeaderTimeout bounds reading a request's headers (default 10 s).
	HeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body once its headers arrived
	// (default 30 s): a client sending one byte a second is cut off.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request for this
	// long (default 5 s: uvicorn's timeout_keep_alive, vLLM's
	// VLLM_HTTP_TIMEOUT_KEEP_ALIVE).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers (default 16 KiB,
	// the h11 limit under uvicorn).
	MaxHeaderBytes int
	// MaxConnections bounds open connections; one more is answered 503 and
	// closed (default 1024).
	MaxConnections int
	// RequestTimeout bounds a generation request from arrival to its last
	// byte; a request still running then is aborted and answered 504 (or an
	// error event in a stream). Default 10 minutes, the OpenAI client's own
	// timeout; negative: no deadline.
	RequestTimeout time.Duration
}

// Defaults of HTTPLimits.
const (
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultBodyTimeout    = 30 * time.Second
	DefaultIdleTimeout    = 5 * time.Second
	DefaultMaxHeaderBytes = 16 << 10
	DefaultMaxConnections = 1024
	DefaultRequestTimeout = 10 * time.Minute
)

// WithDefaults fills the zero fields.
func (l HTTPLimits) WithDefaults() HTTPLimits {
	if l.HeaderTimeout == 0 {
		l.HeaderTimeout = DefaultHeaderTimeout
	}
	if l.BodyTimeout == 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.RequestTimeout == 0 {
		l.RequestTimeout = DefaultRequestTimeout
	}
	return l
}

// Validate refuses limits that cannot work, naming the flag.
func (l HTTPLimits) Validate() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--http-header-timeout", l.HeaderTimeout}, {"--http-body-timeout", l.BodyTimeout}, {"--http-keep-alive-timeout", l.IdleTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%s %v must be positive", d.flag, d.v)
		}
	}
	switch {
	case l.MaxHeaderBytes < 0 || l.MaxHeaderBytes > 16<<20:
		return fmt.Errorf("--http-max-header-bytes %d must be in [1, %d]; 16384 is the usual setting", l.MaxHeaderBytes, 16<<20)
	case l.MaxConnections < 0 || l.MaxConnections > 1<<20:
		return fmt.Errorf("--max-connections %d must be in [1, %d]", l.MaxConnections, 1<<20)
	}
	return nil
}

// HTTPServer is an http.Server for s under limits l (defaults filled): its
// header and idle timeouts and header size. The body and request deadlines
// are the Server's own (Config.HTTP); the connection cap is the listener's
// (LimitListener).
func (s *Server) HTTPServer() *http.Server {
	l := s.cfg.HTTP
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: l.HeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// LimitListener accepts at most max connections at once from ln; a
// connection beyond that is answered at once with 503 and an OpenAI error
// body, and closed, so that a client learns the server is full instead of
// waiting in the kernel's backlog.
func LimitListener(ln net.Listener, max int) *LimitedListener {
	return &LimitedListener{Listener: ln, max: max}
}

// LimitedListener is a listener under a connection cap (LimitListener).

type LimitedListener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open int
}

// Open is the number of connections currently held.
func (l *LimitedListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *LimitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.open >= l.max {
			l.mu.Unlock()
			go refuseConn(c, l.max)
			continue
		}
		l.open++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: l.release}, nil
	}
}

func (l *LimitedListener) release() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
}

// refuseConn answers one connection over the cap with 503 and closes it.
func refuseConn(c net.Conn, max int) {
	defer c.Close()
	body := fmt.Sprintf(`{"error":{"message":"the server holds %d connections, its --max-connections; retry later","type":"server_error","param":null,"code":"too_many_connections"}}`, max)
	c.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s", len(body), body)
}

// countedConn gives its slot back once, when closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
