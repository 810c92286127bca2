package comm

import (
	"fmt"
	"slices"
	"strings"
)

// Layout is the tensor-parallel (TP), prefill-context-parallel (PCP) and
// decode-context-parallel (DCP) arrangement of the world, with data and
// pipeline parallelism fixed at 1. The world has TP·PCP ranks; global rank
// = pcp_rank·TP + tp_rank (TP innermost). DCP does not add ranks: with
// PCP = 1 a DCP group is a contiguous run of DCP ranks inside the TP group;
// with PCP > 1 it is a singleton (DCP = 1), the PCP group (DCP = PCP) or the
// whole world (DCP = TP·PCP).
type Layout struct {
	TP, PCP, DCP int
}

// Validate refuses layouts the group construction cannot serve. Each
// refusal names the constraint, the values and settings that would work.
func (l Layout) Validate() error {
	for _, s := range []struct {
		flag string
		v    int
	}{{"tensor-parallel-size", l.TP}, {"prefill-context-parallel-size", l.PCP}, {"decode-context-parallel-size", l.DCP}} {
		if s.v < 1 {
			return fmt.Errorf("%s %d must be at least 1; use --%s 1", s.flag, s.v, s.flag)
		}
	}
	if l.PCP == 1 {
		if l.TP%l.DCP != 0 {
			return fmt.Errorf("decode-context-parallel-size %d does not divide tensor-parallel-size %d (PCP=1 needs tp %% dcp == 0); use --decode-context-parallel-size %s",
				l.DCP, l.TP, orList(divisors(l.TP)))
		}
		return nil
	}
	valid := l.validDCP()
	if !slices.Contains(valid, l.DCP) {
		return fmt.Errorf("decode-context-parallel-size %d is not allowed with prefill-context-parallel-size %d and tensor-parallel-size %d (PCP>1 needs DCP off, spanning the PCP axis or spanning TP×PCP: dcp ∈ {1, pcp, tp·pcp}); use --decode-context-parallel-size %s",
			l.DCP, l.PCP, l.TP, orList(valid))
	}
	return nil
}

// validDCP lists the DCP sizes allowed with PCP > 1, ascending.
func (l Layout) validDCP() []int {
	v := []int{1, l.PCP, l.TP * l.PCP}
	slices.Sort(v)
	return slices.Compact(v)
}

func divisors(n int) []int {
	var d []int
	for i := 1; i <= n; i++ {
		if n%i == 0 {
			d = append(d, i)
		}
	}
	return d
}

// orList formats [1 2 4] as "1, 2 or 4".
func orList(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// World is the number of ranks, TP·PCP.
func (l Layout) World() int { return l.TP * l.PCP }

// TPRank is the rank of global rank within its TP group.
func (l Layout) TPRank(rank int) int { return rank % l.TP }

// PCPRank is the rank of global rank within its PCP group.
func (l Layout) PCPRank(rank int) int { return rank / l.TP }

// DCPRank is the rank of global rank within its DCP group.
func (l Layout) DCPRank(rank int) int {
	if l.PCP == 1 {
		return rank % l.DCP
	}
	switch l.DCP {
	case 1:
		return 0
	case l.TP * l.PCP:
		return rank
	default: // DCP = PCP: the PCP group
		return l.PCPRank(rank)
	}
}

// TPMembers lists the global ranks of rank's TP group in group-rank order.
func (l Layout) TPMembers(rank int) []int {
	base := l.PCPRank(rank) * l.TP
	m := make([]int, l.TP)
	for i := range m {
		m[i] = base + i
	}
	return m
}

// PCPMembers lists the global ranks of rank's PCP group in group-rank order.
func (l Layout) PCPMembers(rank int) []int {
	m := make([]int, l.PCP)
	for i := range m {
		m[i] = i*l.TP + l.TPRank(rank)
	}
	return m
}

// DCPMembers lists the global ranks of rank's DCP group in group-rank order.
func (l Layout) DCPMembers(rank int) []int {
	if l.PCP == 1 {
		base := rank / l.DCP * l.DCP
		m := make([]int, l.DCP)
		for i := range m {
			m[i] = base + i
		}
		return m
	}
	switch l.DCP {
	case 1:
		return []int{rank}
	case l.TP * l.PCP:
		m := make([]int, l.World())
		for i := range m {
			m[i] = i
		}
		return m
	default:
		return l.PCPMembers(rank)
	}
}

// Groups are the process groups one rank takes part in.
type Groups struct {
	World, TP, PCP, DCP Group
}

// Split builds the TP, PCP and DCP groups of the calling rank from its world
// group (whose Rank is the global rank). Every rank of the world must call
// it, with the same layout.
func (l Layout) Split(world Group) (Groups, error) {
	if err := l.Validate(); err != nil {
		return Groups{}, err
	}
	if world.Size() != l.World() {
		return Groups{}, fmt.Errorf("layout TP=%d PCP=%d needs a world of %d ranks, group %s has %d; use a world of TP·PCP ranks",
			l.TP, l.PCP, l.World(), world.Name(), world.Size())
	}
	r := world.Rank()
	g := Groups{World: world}
	var err error
	if g.TP, err = Split(world, "tp", l.TPMembers(r)); err != nil {
		return Groups{}, err
	}
	if g.PCP, err = Split(world, "pcp", l.PCPMembers(r)); err != nil {
		return Groups{}, err
	}
	if g.DCP, err = Split(world, "dcp", l.DCPMembers(r)); err != nil {
		return Groups{}, err
	}
	return g, nil
}
