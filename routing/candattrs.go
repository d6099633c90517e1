package routing

// MergedAttrs returns the attrs a Decision for this candidate carries: its
// pool's attrs overlaid by the entry's (route and boost) attrs. The map is
// shared and must not be modified; it is empty, never nil, for candidates
// of a built table.
func (c *Candidate) MergedAttrs() map[string]string { return c.attrs }
