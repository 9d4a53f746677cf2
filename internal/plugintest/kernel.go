package plugintest

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/sysctl"
)

// Readers of the kernel state a plugin left behind.

// MustLink looks a link up in h's namespace.
func MustLink(t testing.TB, h *netlinkx.Handle, name string) netlinkx.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	Must(t, err)
	return l
}

// LinkNames lists the links of h's namespace, sorted.
func LinkNames(t testing.TB, h *netlinkx.Handle) []string {
	t.Helper()
	links, err := h.Links()
	Must(t, err)
	var names []string
	for _, l := range links {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	return names
}

// WantLinks fails unless exactly the named links exist in h's namespace.
func WantLinks(t testing.TB, h *netlinkx.Handle, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := LinkNames(t, h); !slices.Equal(got, want) {
		t.Errorf("links %v, want %v", got, want)
	}
}

// WaitLinks waits briefly for the kernel to reap links of a destroyed
// namespace, then checks the list (WantLinks).
func WaitLinks(t testing.TB, h *netlinkx.Handle, want ...string) {
	t.Helper()
	for range 100 {
		if len(LinkNames(t, h)) == len(want) {
			break
		}
		SleepBrief()
	}
	WantLinks(t, h, want...)
}

// OnlyVeth returns the only veth in h's namespace, failing the test if
// there is none or more than one.
func OnlyVeth(t testing.TB, h *netlinkx.Handle) netlinkx.Link {
	t.Helper()
	links, err := h.Links()
	Must(t, err)
	var v []netlinkx.Link
	for _, l := range links {
		if l.Kind == "veth" {
			v = append(v, l)
		}
	}
	if len(v) != 1 {
		t.Fatalf("host veths %+v", v)
	}
	return v[0]
}

// AddrStrings lists the addresses of link (family 0: both), link-local
// ones left out, sorted.
func AddrStrings(t testing.TB, h *netlinkx.Handle, link string, family int) []string {
	t.Helper()
	addrs, err := h.Addrs(link, family)
	Must(t, err)
	var out []string
	for _, a := range addrs {
		if a.Prefix.Addr().IsLinkLocalUnicast() {
			continue
		}
		out = append(out, a.Prefix.String())
	}
	slices.Sort(out)
	return out
}

// Sysctl reads a sysctl of ns.
func Sysctl(t testing.TB, ns *netns.NS, key string) string {
	t.Helper()
	v, err := sysctl.Get(ns, key)
	Must(t, err)
	return v
}

// RoutesTo lists the routes of the main table of h's namespace whose
// destination is dst.
func RoutesTo(t testing.TB, h *netlinkx.Handle, dst string) []netlinkx.Route {
	t.Helper()
	p := netip.MustParsePrefix(dst)
	fam := unix.AF_INET
	if p.Addr().Is6() {
		fam = unix.AF_INET6
	}
	rs, err := h.Routes(fam, 0)
	Must(t, err)
	var out []netlinkx.Route
	for _, r := range rs {
		if r.Dst == p {
			out = append(out, r)
		}
	}
	return out
}

// SkipIfNotImplemented skips a test whose plugin call failed only because
// an nftables component is still a stub.
func SkipIfNotImplemented(t testing.TB, o Outcome) {
	t.Helper()
	if o.Status != 0 && strings.Contains(o.Stdout, "not implemented yet") {
		t.Skipf("nftables part not implemented yet: %s", strings.TrimSpace(o.Stdout))
	}
}

// NFTOwned counts the nftables set elements and rules in ns whose comment
// is owner's tag, in any table of ours (nftcni_*).
func NFTOwned(t testing.TB, ns *netns.NS, owner ownerid.Owner) int {
	t.Helper()
	tagged, err := NFTTagged(ns, owner.OwnedBy)
	Must(t, err)
	return len(tagged)
}

// NFTNetwork counts the nftables set elements and rules in ns tagged for
// any attachment of network: what must be gone once every attachment of
// the network was deleted.
func NFTNetwork(t testing.TB, ns *netns.NS, network string) int {
	t.Helper()
	hash := ownerid.NetworkHash(network)
	tagged, err := NFTTagged(ns, func(comment string) bool {
		p, ok := ownerid.ParseTag(comment)
		return ok && p.Network == hash
	})
	Must(t, err)
	return len(tagged)
}

// NFTTagged lists the comments of the nftables set elements and rules in
// ns, in any table of ours (nftcni_*), that satisfy match. It returns an
// error rather than failing the test, so that goroutines other than the
// test's may call it.
func NFTTagged(ns *netns.NS, match func(comment string) bool) ([]string, error) {
	c, err := nftables.New(nftables.WithNetNSFd(ns.Fd()))
	if err != nil {
		return nil, err
	}
	defer c.CloseLasting()
	tables, err := c.ListTables()
	if err != nil {
		return nil, err
	}
	chains, err := c.ListChains()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, tb := range tables {
		if !strings.HasPrefix(tb.Name, "nftcni_") {
			continue
		}
		sets, err := c.GetSets(tb)
		if err != nil {
			return nil, err
		}
		for _, s := range sets {
			elems, err := c.GetSetElements(s)
			if err != nil {
				return nil, err
			}
			for _, e := range elems {
				if match(e.Comment) {
					out = append(out, e.Comment)
				}
			}
		}
		for _, ch := range chains {
			if ch.Table.Name != tb.Name || ch.Table.Family != tb.Family {
				continue
			}
			rules, err := c.GetRules(tb, ch)
			if err != nil {
				return nil, err
			}
			for _, r := range rules {
				if cm, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && match(cm) {
					out = append(out, cm)
				}
			}
		}
	}
	return out, nil
}
