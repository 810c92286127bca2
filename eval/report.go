package eval

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/cpmla/cpmla/bench"
)

// LaneResult is everything one lane's server answered.
type LaneResult struct {
	Lane string
	// K is the lane's num_speculative_tokens (0: plain decoding).
	K          int
	Agreement  []Completion
	Arithmetic []ArithmeticResult
	Passkey    []PasskeyResult
	// SpecDecode is the growth of the server's spec-decode counters
	// (bench.ScrapeSpec) over the eval's requests (nil for plain decoding).
	SpecDecode *bench.SpecCounters
}

// ArithmeticScore is a lane's arithmetic accuracy with both gsm8k filters.
type ArithmeticScore struct {
	N       int `json:"n"`
	Invalid int `json:"invalid"`
	// Formatted counts the replies in which strict-match finds "#### N":
	// answered in the GSM8K format, right or wrong.
	Formatted       int     `json:"strict_formatted"`
	StrictCorrect   int     `json:"strict_correct"`
	FlexibleCorrect int     `json:"flexible_correct"`
	StrictMatch     float64 `json:"exact_match_strict_match"`
	FlexibleExtract float64 `json:"exact_match_flexible_extract"`
}

// LengthScore is the passkey cases of one length.
type LengthScore struct {
	Length  int `json:"length"`
	Correct int `json:"correct"`
	Total   int `json:"total"`
}

// PasskeyScore is a lane's passkey retrieval.
type PasskeyScore struct {
	Correct  int           `json:"correct"`
	Total    int           `json:"total"`
	Invalid  int           `json:"invalid"`
	ByLength []LengthScore `json:"by_length"`
}

// MTPScore is a lane's speculative decoding over the eval's requests, in
// the terms of vLLM's spec-decode counters.
type MTPScore struct {
	Drafts               float64   `json:"num_drafts"`
	DraftTokens          float64   `json:"num_draft_tokens"`
	AcceptedTokens       float64   `json:"num_accepted_tokens"`
	AcceptedPerPos       []float64 `json:"num_accepted_tokens_per_pos"`
	AcceptanceRatePerPos []float64 `json:"acceptance_rate_per_position"`
	MeanAcceptanceLength float64   `json:"mean_acceptance_length"`
}

// LaneReport is one lane's row.
type LaneReport struct {
	Lane                 string           `json:"lane"`
	NumSpeculativeTokens int              `json:"num_speculative_tokens"`
	Agreement            Outcome          `json:"agreement"`
	Arithmetic           *ArithmeticScore `json:"arithmetic,omitempty"`
	Passkey              *PasskeyScore    `json:"passkey,omitempty"`
	MTP                  *MTPScore        `json:"mtp,omitempty"`
	// AgreesWithReference is the fraction of all the lane's requests
	// (agreement prompts, problems, passkey cases) whose well-formed text
	// equals the reference lane's.
	AgreesWithReference float64  `json:"agrees_with_reference"`
	Problems            []string `json:"problems,omitempty"`
	// The replies themselves, when asked for (lm-eval's --log_samples).
	ArithmeticSamples []ArithmeticResult `json:"arithmetic_samples,omitempty"`
	PasskeySamples    []PasskeyResult    `json:"passkey_samples,omitempty"`
}

// WithSamples is rep with every lane's replies to the tasks.
func (rep Report) WithSamples(results []LaneResult) Report {
	for i := range rep.Lanes {
		if i < len(results) {
			rep.Lanes[i].ArithmeticSamples, rep.Lanes[i].PasskeySamples = results[i].Arithmetic, results[i].Passkey
		}
	}
	return rep
}

// Report compares the lanes with the reference lane (the first).
type Report struct {
	Model     string       `json:"model"`
	Reference string       `json:"reference"`
	Lanes     []LaneReport `json:"lanes"`
	// IdenticalAccuracy: every lane scored every problem and case as the
	// reference did. IdenticalAcceptance: every speculative lane accepted
	// as many drafts at every position as the first speculative lane.
	IdenticalAccuracy   bool     `json:"identical_accuracy"`
	IdenticalAcceptance bool     `json:"identical_acceptance"`
	Failures            []string `json:"failures,omitempty"`
}

// maxProblems is how many problems a lane report lists.
const maxProblems = 5

// Compare builds the report of results, results[0] being the reference. A
// lane fails when it agrees with the reference on less than minAgreement of
// its requests, scores any problem or case otherwise than the reference, or
// (speculative lanes) accepts otherwise than the first speculative lane:
// greedy decoding must give the same tokens, and so the same drafts, on
// every layout.
func Compare(model string, results []LaneResult, minAgreement float64) Report {
	rep := Report{Model: model, IdenticalAccuracy: true, IdenticalAcceptance: true}
	if len(results) == 0 {
		return rep
	}
	ref := results[0]
	rep.Reference = ref.Lane
	var firstSpec *LaneResult
	for i := range results {
		r := &results[i]
		lr := LaneReport{Lane: r.Lane, NumSpeculativeTokens: r.K, Agreement: Score(r.Lane, r.Agreement, ref.Agreement)}
		problem := func(format string, args ...any) {
			if len(lr.Problems) < maxProblems {
				lr.Problems = append(lr.Problems, fmt.Sprintf(format, args...))
			}
		}
		lr.Problems = append(lr.Problems, lr.Agreement.Problems...)
		agree, total := lr.Agreement.Agreed, lr.Agreement.Total
		accuracyDiffers := ""
		if ref.Arithmetic != nil || r.Arithmetic != nil {
			lr.Arithmetic = scoreArithmetic(r.Arithmetic)
			for j, a := range r.Arithmetic {
				total++
				if accuracyDiffers == "" && (j >= len(ref.Arithmetic) || a.StrictOK != ref.Arithmetic[j].StrictOK || a.FlexibleOK != ref.Arithmetic[j].FlexibleOK) {
					accuracyDiffers = fmt.Sprintf("problem %d", j)
				}
				switch {
				case !a.OK:
					problem("problem %d: %s", j, a.Problem)
				case j < len(ref.Arithmetic) && ref.Arithmetic[j].OK && ref.Arithmetic[j].Text == a.Text:
					agree++
				default:
					problem("problem %d: %q differs from %s's %q", j, a.Text, ref.Lane, refText(ref.Arithmetic, j))
				}
			}
			if len(r.Arithmetic) != len(ref.Arithmetic) && accuracyDiffers == "" {
				accuracyDiffers = fmt.Sprintf("%d problems against %d", len(r.Arithmetic), len(ref.Arithmetic))
			}
		}
		if ref.Passkey != nil || r.Passkey != nil {
			lr.Passkey = scorePasskey(r.Passkey)
			for j, p := range r.Passkey {
				total++
				if accuracyDiffers == "" && (j >= len(ref.Passkey) || p.Correct != ref.Passkey[j].Correct) {
					accuracyDiffers = fmt.Sprintf("passkey case %d (length %d, depth %v)", j, p.Case.Length, p.Case.Depth)
				}
				if p.Problem != "" {
					problem("passkey %d (length %d, depth %v): %s", j, p.Case.Length, p.Case.Depth, p.Problem)
				}
				switch {
				case !p.OK:
				case j < len(ref.Passkey) && ref.Passkey[j].OK && ref.Passkey[j].Text == p.Text:
					agree++
				default:
					problem("passkey %d (length %d, depth %v): %q differs from %s's", j, p.Case.Length, p.Case.Depth, p.Text, ref.Lane)
				}
			}
			if len(r.Passkey) != len(ref.Passkey) && accuracyDiffers == "" {
				accuracyDiffers = fmt.Sprintf("%d passkey cases against %d", len(r.Passkey), len(ref.Passkey))
			}
		}
		if total > 0 {
			lr.AgreesWithReference = float64(agree) / float64(total)
		}
		if accuracyDiffers != "" {
			rep.IdenticalAccuracy = false
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s scores %s otherwise than %s", r.Lane, accuracyDiffers, ref.Lane))
		}
		if lr.AgreesWithReference < minAgreement {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s agrees with %s on %.3f of its requests, below the minimum %.3f", r.Lane, ref.Lane, lr.AgreesWithReference, minAgreement))
		}
		if r.K > 0 {
			if r.SpecDecode == nil {
				rep.IdenticalAcceptance = false
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s speculates with K = %d but its server reported no spec-decode counters", r.Lane, r.K))
			} else {
				c := r.SpecDecode
				lr.MTP = &MTPScore{Drafts: c.Drafts, DraftTokens: c.DraftTokens, AcceptedTokens: c.AcceptedTokens, AcceptedPerPos: c.AcceptedPerPos,
					AcceptanceRatePerPos: c.PerPosRates(), MeanAcceptanceLength: c.AcceptanceLength()}
				if firstSpec == nil {
					firstSpec = r
				} else if d := acceptanceDiff(*firstSpec.SpecDecode, *r.SpecDecode); firstSpec.K == r.K && d != "" {
					rep.IdenticalAcceptance = false
					rep.Failures = append(rep.Failures, fmt.Sprintf("%s accepts otherwise than %s: %s", r.Lane, firstSpec.Lane, d))
				}
			}
		}
		rep.Lanes = append(rep.Lanes, lr)
	}
	return rep
}

func refText(ref []ArithmeticResult, j int) string {
	if j < len(ref) {
		return ref[j].Text
	}
	return "(none)"
}

// acceptanceDiff names the first count in which a and b differ (counts,
// exact below 2^53 in float64; a NaN differs from everything).
func acceptanceDiff(a, b bench.SpecCounters) string {
	switch {
	case a.Drafts != b.Drafts:
		return fmt.Sprintf("%v drafts against %v", b.Drafts, a.Drafts)
	case a.DraftTokens != b.DraftTokens:
		return fmt.Sprintf("%v draft tokens against %v", b.DraftTokens, a.DraftTokens)
	case !slices.Equal(a.AcceptedPerPos, b.AcceptedPerPos):
		return fmt.Sprintf("accepted per position %v against %v", b.AcceptedPerPos, a.AcceptedPerPos)
	case a.AcceptedTokens != b.AcceptedTokens:
		return fmt.Sprintf("%v accepted tokens against %v", b.AcceptedTokens, a.AcceptedTokens)
	}
	return ""
}

func scoreArithmetic(rs []ArithmeticResult) *ArithmeticScore {
	s := &ArithmeticScore{N: len(rs)}
	for _, r := range rs {
		if !r.OK {
			s.Invalid++
		}
		if r.Strict != invalidAnswer {
			s.Formatted++
		}
		if r.StrictOK {
			s.StrictCorrect++
		}
		if r.FlexibleOK {
			s.FlexibleCorrect++
		}
	}
	if s.N > 0 {
		s.StrictMatch = float64(s.StrictCorrect) / float64(s.N)
		s.FlexibleExtract = float64(s.FlexibleCorrect) / float64(s.N)
	}
	return s
}

func scorePasskey(rs []PasskeyResult) *PasskeyScore {
	s := &PasskeyScore{Total: len(rs)}
	at := map[int]int{}
	for _, r := range rs {
		if !r.OK {
			s.Invalid++
		}
		i, ok := at[r.Case.Length]
		if !ok {
			i = len(s.ByLength)
			at[r.Case.Length] = i
			s.ByLength = append(s.ByLength, LengthScore{Length: r.Case.Length})
		}
		s.ByLength[i].Total++
		if r.Correct {
			s.Correct++
			s.ByLength[i].Correct++
		}
	}
	return s
}

// WriteTable prints the report as a table, then each lane's problems and
// the failures.
func (rep Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "LANE\tDECODING\tARITHMETIC STRICT / FLEXIBLE\tPASSKEY\tMTP ACCEPTANCE BY POSITION\tAGREES WITH %s\n", strings.ToUpper(rep.Reference))
	for _, l := range rep.Lanes {
		dec := "plain"
		if l.NumSpeculativeTokens > 0 {
			dec = fmt.Sprintf("mtp k=%d", l.NumSpeculativeTokens)
		}
		arith, pass, mtp := "-", "-", "-"
		if a := l.Arithmetic; a != nil {
			arith = fmt.Sprintf("%.3f / %.3f (%d; %d in format)", a.StrictMatch, a.FlexibleExtract, a.N, a.Formatted)
		}
		if p := l.Passkey; p != nil {
			parts := make([]string, len(p.ByLength))
			for i, b := range p.ByLength {
				parts[i] = fmt.Sprintf("%d: %d/%d", b.Length, b.Correct, b.Total)
			}
			pass = fmt.Sprintf("%d/%d (%s)", p.Correct, p.Total, strings.Join(parts, ", "))
		}
		if m := l.MTP; m != nil {
			parts := make([]string, len(m.AcceptanceRatePerPos))
			for i, v := range m.AcceptanceRatePerPos {
				parts[i] = fmt.Sprintf("%.1f%%", 100*v)
			}
			mtp = fmt.Sprintf("%s (%.0f drafts)", strings.Join(parts, " "), m.Drafts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.3f\n", l.Lane, dec, arith, pass, mtp, l.AgreesWithReference)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range rep.Lanes {
		for _, p := range l.Problems {
			fmt.Fprintf(w, "%s: %s\n", l.Lane, p)
		}
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "FAIL: %s\n", f)
	}
	return nil
}
