package netlinkx_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestTap creates persistent taps through /dev/net/tun in a throwaway
// namespace and reads back their tun attributes.
func TestTap(t *testing.T) {
	// Not RequireLinkKind: the tun driver refuses RTM_NEWLINK with the
	// very EOPNOTSUPP that probe reads as "no driver".
	privtest.Require(t)
	_, h := newNS(t)
	uid, gid := uint32(1000), uint32(0)
	for _, s := range []netlinkx.TapSpec{
		{Name: "tap-plain"},
		{Name: "tap-mq", MultiQueue: true, VnetHdr: true, Owner: &uid, Group: &gid},
	} {
		must(t, h.AddTap(s))
		l := mustLink(t, h, s.Name)
		ti, err := h.TunInfo(s.Name)
		must(t, err)
		if l.Kind != "tun" || !ti.Tap || !ti.Persist || ti.PI || ti.MultiQueue != s.MultiQueue || ti.VnetHdr != s.VnetHdr || ti.Queues != 0 {
			t.Errorf("%s: link %+v, tun %+v", s.Name, l, ti)
		}
		if (ti.Owner == nil) != (s.Owner == nil) || (ti.Owner != nil && *ti.Owner != *s.Owner) ||
			(ti.Group == nil) != (s.Group == nil) || (ti.Group != nil && *ti.Group != *s.Group) {
			t.Errorf("%s: owner %v group %v", s.Name, ti.Owner, ti.Group)
		}
	}
	wantErr(t, h.AddTap(netlinkx.TapSpec{Name: "tap-plain"}), `adding tap "tap-plain": device or resource busy`, unix.EBUSY)
	wantErr(t, h.AddTap(netlinkx.TapSpec{Name: "lo"}), `adding tap "lo": device or resource busy`, unix.EBUSY)
	wantErr(t, h.AddTap(netlinkx.TapSpec{Name: "much-too-long-name"}), `adding tap "much-too-long-name": invalid argument`, unix.EINVAL)
	_, err := h.TunInfo("lo")
	wantErr(t, err, `reading tun attributes of "lo": not a tun/tap device`, netlinkx.ErrNotTun)
	_, err = h.TunInfo("nope")
	wantErr(t, err, `reading tun attributes of "nope": Link not found`, netlinkx.ErrNotFound)
	must(t, h.DeleteLink("tap-plain"))
}
