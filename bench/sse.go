package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// maxEventBytes bounds one server-sent event.
const maxEventBytes = 4 << 20

// ReadEvents reads server-sent events from r and calls fn with the data of
// each event and the time its closing blank line arrived. Lines other than
// data: (comments, event:, id:, retry:) are skipped; the data lines of one
// event are joined with newlines, and an event cut off by the end of the
// stream is dropped, as the SSE format defines. fn returning false stops
// reading.
func ReadEvents(r io.Reader, fn func(data []byte, at time.Time) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	have := false
	for {
		line, err := readLine(br)
		at := time.Now()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		complete := err == nil // the line ended with a newline
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case complete && len(line) == 0:
			if have {
				if !fn(data, at) {
					return nil
				}
				data, have = data[:0], false
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if have {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(line[len("data:"):], []byte(" "))...)
			have = true
			if len(data) > maxEventBytes {
				return fmt.Errorf("server-sent event longer than %d bytes", maxEventBytes)
			}
		}
		if !complete {
			return nil
		}
	}
}

// readLine returns the next line including its newline; at the end of the
// stream it returns the unterminated rest with io.EOF.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read event stream: %w", err)
		}
		return line, err
	}
	long := append([]byte(nil), line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		if len(long) > maxEventBytes {
			return nil, fmt.Errorf("server-sent event line longer than %d bytes", maxEventBytes)
		}
		line, err = br.ReadSlice('\n')
		long = append(long, line...)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read event stream: %w", err)
	}
	return long, err
}

// streamChunk is the part of a completion or chat chunk the client reads.
type streamChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// measured is one streamed request's timings and totals.
type measured struct {
	ttft, latency    float64
	itl              []float64
	text             []byte
	promptTokens     int
	completionTokens int
	usage            bool
}

// stream posts body to url and times the streamed response; sent is the
// moment the request left. A non-200 status, a malformed chunk, an error
// event or a stream without any choice is an error.
func stream(ctx context.Context, client *http.Client, url string, body []byte) (m measured, sent time.Time, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return m, sent, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	sent = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return m, sent, fmt.Errorf("send request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return m, sent, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	var last time.Time
	chunks := 0
	var parseErr error
	readErr := ReadEvents(resp.Body, func(data []byte, at time.Time) bool {
		if bytes.Equal(data, []byte("[DONE]")) {
			return false
		}
		var c streamChunk
		if err := json.Unmarshal(data, &c); err != nil {
			parseErr = fmt.Errorf("chunk %d is not JSON: %w", chunks+1, err)
			return false
		}
		if c.Error != nil {
			parseErr = fmt.Errorf("server error in stream: %s", c.Error.Message)
			return false
		}
		if len(c.Choices) > 0 {
			if chunks == 0 {
				m.ttft = at.Sub(sent).Seconds()
			} else {
				m.itl = append(m.itl, at.Sub(last).Seconds())
			}
			chunks++
			last = at
			m.text = append(m.text, c.Choices[0].Text...)
			m.text = append(m.text, c.Choices[0].Delta.Content...)
		}
		if c.Usage != nil {
			m.usage = true
			m.promptTokens, m.completionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
		return true
	})
	switch {
	case parseErr != nil:
		return m, sent, parseErr
	case readErr != nil:
		return m, sent, readErr
	case chunks == 0:
		return m, sent, errors.New("the stream ended without a single chunk with a choice")
	}
	m.latency = last.Sub(sent).Seconds()
	return m, sent, nil
}
