package comm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GroupName is the name a transport gives the group of the world ranks
// ranks made under role: "tp[0 1]". Every member of a group derives the same
// name, so it also serves as the group's key.
func GroupName(role string, ranks []int) string {
	var b strings.Builder
	b.WriteString(role)
	b.WriteByte('[')
	for i, r := range ranks {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(r))
	}
	b.WriteByte(']')
	return b.String()
}

// SplitMembers checks a Group.Split on one member of the group parent, whose
// members are the world ranks parentRanks and which this member holds as
// rank: the new group is called name and made of the listed members (ranks
// of parent). It returns the new group's key (GroupName), the members' world
// ranks and this member's rank in it, or an error naming what is wrong: a
// name with spaces or brackets, no members, a member outside the parent or
// listed twice, or this member not among them.
func SplitMembers(parent string, parentRanks []int, rank int, name string, members []int) (key string, ranks []int, self int, err error) {
	if name == "" || strings.ContainsAny(name, "[] ") {
		return "", nil, -1, fmt.Errorf("group name %q must be non-empty without spaces or brackets", name)
	}
	if len(members) == 0 {
		return "", nil, -1, fmt.Errorf("group %s: no members", name)
	}
	self = -1
	ranks = make([]int, len(members))
	for i, r := range members {
		if r < 0 || r >= len(parentRanks) {
			return "", nil, -1, fmt.Errorf("group %s: member %d outside %s (size %d)", name, r, parent, len(parentRanks))
		}
		if slices.Contains(members[:i], r) {
			return "", nil, -1, fmt.Errorf("group %s: member %d listed twice in %v", name, r, members)
		}
		if r == rank {
			self = i
		}
		ranks[i] = parentRanks[r]
	}
	key = GroupName(name, ranks)
	if self < 0 {
		return "", nil, -1, fmt.Errorf("group %s: rank %d of %s is not among the members %v; only members split a group", key, rank, parent, members)
	}
	return key, ranks, self, nil
}
