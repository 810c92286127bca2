package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Config is a --speculative-config: vLLM's JSON object, of which cpmla runs
// the model's own MTP layer ("method": "mtp").
type Config struct {
	Method string `json:"method"`
	// NumSpeculativeTokens is K, the drafts proposed per step: the MTP layer
	// runs K times in a chain.
	NumSpeculativeTokens int `json:"num_speculative_tokens"`
}

// MaxTokens bounds num_speculative_tokens.
const MaxTokens = 16

// keys are the keys a --speculative-config may hold and what cpmla makes of
// each: method and num_speculative_tokens are read; the others are accepted
// only at the value that changes nothing.
var keys = map[string]func(json.RawMessage) error{
	"method":                 nil,
	"num_speculative_tokens": nil,
	"model": func(r json.RawMessage) error {
		var s *string
		if json.Unmarshal(r, &s) != nil || (s != nil && *s != "") {
			return fmt.Errorf("the MTP drafter is the target checkpoint's own MTP layer; leave model unset")
		}
		return nil
	},
	"parallel_drafting": func(r json.RawMessage) error {
		var b bool
		if json.Unmarshal(r, &b) != nil || b {
			return fmt.Errorf("parallel drafting needs a drafter trained to draft every token in one pass (P-EAGLE, DFlash); the MTP layer drafts in a chain: set it false or leave it out")
		}
		return nil
	},
	"draft_tensor_parallel_size": func(r json.RawMessage) error {
		var n *int
		if json.Unmarshal(r, &n) != nil || (n != nil && *n != 0) {
			return fmt.Errorf("the MTP drafter runs on the target's own layout (tensor, prefill- and decode-context parallel) by construction; leave draft_tensor_parallel_size unset")
		}
		return nil
	},
}

// ParseConfig reads a --speculative-config JSON object. An empty string
// means no speculation (nil, nil). Every key but method and
// num_speculative_tokens is refused unless it holds the value that changes
// nothing, and any other method is refused by name.
func ParseConfig(s string) (*Config, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return nil, fmt.Errorf("--speculative-config %q is not a JSON object, e.g. '{\"method\":\"mtp\",\"num_speculative_tokens\":1}'", s)
	}
	var names []string
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		check, known := keys[k]
		if !known {
			return nil, fmt.Errorf("--speculative-config key %q is not implemented; cpmla reads method and num_speculative_tokens", k)
		}
		if check != nil {
			if err := check(raw[k]); err != nil {
				return nil, fmt.Errorf("--speculative-config %s: %w", k, err)
			}
		}
	}
	var c Config
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return nil, fmt.Errorf("--speculative-config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate refuses a method other than "mtp" and a token count outside
// [1, MaxTokens].
func (c *Config) Validate() error {
	if c.Method != "mtp" {
		return fmt.Errorf("--speculative-config method %q is not implemented; use \"mtp\" (the checkpoint's multi-token-prediction layer)", c.Method)
	}
	if c.NumSpeculativeTokens < 1 || c.NumSpeculativeTokens > MaxTokens {
		return fmt.Errorf("--speculative-config num_speculative_tokens is %d; use 1…%d", c.NumSpeculativeTokens, MaxTokens)
	}
	return nil
}

// K is the number of drafts per step (0 for a nil config: no speculation).
func (c *Config) K() int {
	if c == nil {
		return 0
	}
	return c.NumSpeculativeTokens
}

// AcceptGreedy verifies greedy drafts: target(i) is the target's greedy
// token after the sequence extended by drafts[:i] (its verification row i,
// i = 0…len(drafts)). It returns how many drafts are accepted — the longest
// prefix with drafts[i] == target(i) — and the token that follows them, the
// target's choice at the first mismatch (or its bonus token after every
// draft was accepted). target is called in order and never past the first
// mismatch, so a caller may advance sampling state inside it.
func AcceptGreedy(drafts []int32, target func(i int) int32) (accepted int, next int32) {
	for i, d := range drafts {
		t := target(i)
		if t != d {
			return i, t
		}
	}
	return len(drafts), target(len(drafts))
}

// Stats counts speculation as vLLM's spec-decode metrics do. It is a plain
// value: copying it allocates nothing.
type Stats struct {
	// K is the drafts proposed per round at most.
	K int
	// Drafts is the number of draft rounds (a request's drafts verified in
	// one step count one); DraftTokens the drafts proposed; AcceptedTokens
	// those accepted.
	Drafts, DraftTokens, AcceptedTokens int64
	// AcceptedPerPos[i] counts the rounds whose draft i was accepted (only
	// the first K are used: see PerPos).
	AcceptedPerPos [MaxTokens]int64
}

// NewStats returns statistics for up to k drafts per round.
func NewStats(k int) Stats { return Stats{K: min(max(k, 0), MaxTokens)} }

// PerPos is AcceptedPerPos[:K].
func (s *Stats) PerPos() []int64 { return s.AcceptedPerPos[:s.K] }

// Add records one round: k drafts proposed, accepted of them accepted.
func (s *Stats) Add(k, accepted int) {
	s.Drafts++
	s.DraftTokens += int64(k)
	s.AcceptedTokens += int64(accepted)
	for i := 0; i < accepted && i < s.K; i++ {
		s.AcceptedPerPos[i]++
	}
}

// Merge adds o's counts.
func (s *Stats) Merge(o Stats) {
	s.Drafts += o.Drafts
	s.DraftTokens += o.DraftTokens
	s.AcceptedTokens += o.AcceptedTokens
	s.K = max(s.K, o.K)
	for i := range o.AcceptedPerPos {
		s.AcceptedPerPos[i] += o.AcceptedPerPos[i]
	}
}

// MeanAcceptanceLength is the tokens a round produced on average: the
// accepted drafts plus the target's own token (vLLM's mean acceptance
// length; 1 without any acceptance).
func (s Stats) MeanAcceptanceLength() float64 {
	if s.Drafts == 0 {
		return 0
	}
	return 1 + float64(s.AcceptedTokens)/float64(s.Drafts)
}

// AcceptanceRatePerPos is AcceptedPerPos over the rounds.
func (s Stats) AcceptanceRatePerPos() []float64 {
	out := make([]float64, s.K)
	for i, v := range s.AcceptedPerPos[:s.K] {
		if s.Drafts > 0 {
			out[i] = float64(v) / float64(s.Drafts)
		}
	}
	return out
}
