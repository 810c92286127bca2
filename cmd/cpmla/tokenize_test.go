package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseIDList(t *testing.T) {
	cases := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{"1,2,3", []int{1, 2, 3}, ""},
		{" 0, 19923 ,2058 ", []int{0, 19923, 2058}, ""},
		{"[4,5]", []int{4, 5}, ""},
		{"", nil, "--ids is empty"},
		{"1,,2", nil, `item 2 ""`},
		{"-1", nil, "not a non-negative integer"},
		{"1;2", nil, "not a non-negative integer"},
	}
	for _, c := range cases {
		got, err := parseIDList("--ids", c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("parseIDList(%q) error %v, want one containing %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseIDList(%q): %v", c.in, err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("parseIDList(%q) (-want +got):\n%s", c.in, diff)
		}
	}
}

func FuzzParseIDList(f *testing.F) {
	f.Add("1,2,3")
	f.Add("[0, 7]")
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := parseIDList("--ids", s)
		if err != nil {
			return
		}
		for _, id := range ids {
			if id < 0 {
				t.Fatalf("parseIDList(%q) accepted negative id %d", s, id)
			}
		}
	})
}

// TestTokenizeRoundTripCommand runs tokenize and detokenize through the
// command tree: the ids printed by one give back the text in the other.
func TestTokenizeRoundTripCommand(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("cpmla %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSuffix(out.String(), "\n")
	}
	text := "Hello, 世界 <｜User｜>"
	ids := run("tokenize", "--text", text)
	if !strings.HasPrefix(ids, "[0,") {
		t.Errorf("tokenize output %q does not start with BOS", ids)
	}
	if got := run("detokenize", "--skip-special", "--ids", ids); got != text {
		t.Errorf("detokenize gave %q, want %q", got, text)
	}
	plain := run("tokenize", "--no-special", "--text", text)
	if got := run("detokenize", "--ids", plain); got != text {
		t.Errorf("detokenize of --no-special ids gave %q, want %q", got, text)
	}
}
