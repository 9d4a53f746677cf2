//go:build !nftcni_crashpoints

package crashpoint

// Enabled is false in normal builds: callers that build a step name at run
// time guard it with `if crashpoint.Enabled`, so the name is not even
// computed.
const Enabled = false

// Hit does nothing in normal builds.
func Hit(string) {}
