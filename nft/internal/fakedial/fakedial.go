// Package fakedial is the one seam through which tests put a fake
// nf_tables under the nftables components: nft.Open dials Dial instead of
// the kernel while it is set. It lives under nft/internal so that only the
// nft layer and its test helpers (nft/internal/nfttest) can reach it; a
// plugin cannot swap the kernel out.
package fakedial

import "github.com/mdlayher/netlink"

// Dial, when set, is what nft.Open dials instead of the kernel, whatever
// the namespace. nfttest.Use sets it for the length of a test; nothing
// else does, so tests that set it must not run in parallel.
var Dial func() *netlink.Conn
