package bench

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func collect(t *testing.T, in string) []string {
	t.Helper()
	var got []string
	err := ReadEvents(strings.NewReader(in), func(data []byte, _ time.Time) bool {
		got = append(got, string(data))
		return true
	})
	if err != nil {
		t.Fatalf("ReadEvents(%q): %v", in, err)
	}
	return got
}

func TestReadEvents(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"two events", "data: a\n\ndata: b\n\n", []string{"a", "b"}},
		{"no space after colon", "data:a\n\n", []string{"a"}},
		{"CRLF lines", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}},
		{"multi-line data joined by newline", "data: a\ndata: b\n\n", []string{"a\nb"}},
		{"comments and other fields skipped", ": keep-alive\nevent: x\nid: 3\ndata: a\n\n", []string{"a"}},
		{"blank lines without data dispatch nothing", "\n\n\ndata: a\n\n\n", []string{"a"}},
		{"event cut off by the end is dropped", "data: a\n\ndata: b\n", []string{"a"}},
		{"empty stream", "", nil},
		{"long line", "data: " + strings.Repeat("x", 100000) + "\n\n", []string{strings.Repeat("x", 100000)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, collect(t, tc.in)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadEventsStops(t *testing.T) {
	n := 0
	err := ReadEvents(strings.NewReader("data: a\n\ndata: [DONE]\n\ndata: late\n\n"), func(data []byte, _ time.Time) bool {
		n++
		return !bytes.Equal(data, []byte("[DONE]"))
	})
	if err != nil || n != 2 {
		t.Errorf("read %d events (err %v), want 2: reading stops when fn returns false", n, err)
	}
}

// FuzzReadEvents: any bytes are read without panicking, and any list of
// single-line events written in the SSE format reads back unchanged.
func FuzzReadEvents(f *testing.F) {
	f.Add("a\x00b", []byte("data: x\r\n\r\n"))
	f.Add("{\"choices\":[]}\x00[DONE]", []byte(":\n\ndata:\n\n"))
	f.Fuzz(func(t *testing.T, joined string, raw []byte) {
		_ = ReadEvents(bytes.NewReader(raw), func([]byte, time.Time) bool { return true })

		var want []string
		var in strings.Builder
		for _, e := range strings.Split(joined, "\x00") {
			if strings.ContainsAny(e, "\r\n") || strings.HasPrefix(e, " ") {
				continue
			}
			want = append(want, e)
			in.WriteString("data: " + e + "\n\n")
		}
		if diff := cmp.Diff(want, collect(t, in.String())); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
	})
}

// BenchmarkReadEvents measures how fast the client takes completion chunks
// off the wire.
func BenchmarkReadEvents(b *testing.B) {
	var in bytes.Buffer
	for i := range 1000 {
		fmt.Fprintf(&in, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok%d\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", i)
	}
	data := in.Bytes()
	for b.Loop() {
		n := 0
		if err := ReadEvents(bytes.NewReader(data), func([]byte, time.Time) bool { n++; return true }); err != nil || n != 1000 {
			b.Fatalf("read %d events: %v", n, err)
		}
	}
	b.ReportMetric(float64(len(data))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
