package nft

// ResetProbes forgets cached feature probes, so tests can probe a fake
// kernel without poisoning the answers for live tests.
func ResetProbes() {
	probed.Lock()
	defer probed.Unlock()
	probed.known = [numFeatures]bool{}
	probed.err = [numFeatures]error{}
}
