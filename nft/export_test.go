package nft

// ResetProbes forgets cached feature probes, so tests can probe a fake
// kernel without poisoning the answers for live tests.
func ResetProbes() {
	probed.Lock()
	defer probed.Unlock()
	probed.known = [numFeatures]bool{}
	probed.err = [numFeatures]error{}
}

// OwnProbes gives c a feature-probe cache of its own and returns c: a
// test probing a fake kernel through it neither reads nor changes the
// process's answers, so it runs in parallel with the others.
func (c *Conn) OwnProbes() *Conn {
	c.probes = new(probeCache)
	return c
}

// SetupPaths reports how many Setups took a lookup path (fast or recorded) so
// far, and how many of those fell back to the slow path.
func SetupPaths() (fast, fallback int64) { return paths.fast.Load(), paths.fallback.Load() }

// Unsupported is the error Require and Explain give for a missing f.
func Unsupported(f Feature, err error) error { return f.unsupported(err) }
