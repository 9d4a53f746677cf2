package netlinkx

// SetVethNamer replaces the random peer-name generator of CreateVethPair
// and returns a function restoring the real one.
func SetVethNamer(f func() (string, error)) (restore func()) {
	old := newVethName
	newVethName = f
	return func() { newVethName = old }
}
