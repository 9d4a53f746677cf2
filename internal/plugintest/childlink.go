package plugintest

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Scenarios the single-interface plugins' tests (macvlan, ipvlan, vlan,
// dummy) share: their container interface is one link named eth0, with
// IPAM's addresses, and a host that keeps the same links throughout. Each
// plugin's own wording stays in its tests: these take it as arguments.

// MatchMsg reports an error message that differs from want: an exact
// match, or a regexp match when want starts with "^".
func MatchMsg(t testing.TB, what, got, want string) {
	t.Helper()
	if strings.HasPrefix(want, "^") {
		if ok, _ := regexp.MatchString(want, got); ok {
			return
		}
	} else if got == want {
		return
	}
	t.Errorf("%s: %q\n want %q", what, got, want)
}

// UnreachableRoute is IPAM config (host-local in dir, on subnet) whose
// route's gateway is off-link, so ADD fails after the interface was made
// and addressed, with the message UnreachableMsg.
func UnreachableRoute(dir, subnet string) string {
	return fmt.Sprintf(`,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]}`, dir, subnet)
}

// UnreachableMsg is the message of an ADD with UnreachableRoute.
const UnreachableMsg = `^failed to add route '192\.168\.0\.0/16 via 10\.99\.0\.1 dev eth0 .*': network is unreachable$`

// FailedAdd is one ADD that fails (with Msg, see MatchMsg) after IPAM or
// the kernel was asked for something. Conf is the whole config. With
// Existing the container already has an eth0 (a veth to mine0) of its own.
type FailedAdd struct {
	Name, Conf, Msg string
	Existing        bool
}

// FailedAdds runs each case in a subtest, on a world of its own (world
// makes it) and a new container: ADD fails with the case's message and
// leaves nothing behind — the container has only lo (and its own eth0,
// untouched), the host only hostLinks, no reservation is left in the
// host-local store dir. after, when given, runs last (e.g. to show a
// resource is free again).
func FailedAdds(t *testing.T, dir string, world func(t *testing.T) *Host, hostLinks []string, cases []FailedAdd, after func(t *testing.T, h *Host)) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			h := world(t)
			ctr, hc := NewCtr(t, NoDAD)
			if tt.Existing {
				Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "mine0"}))
			}
			e := h.Fail(Cmd("ADD", ctr, "f", tt.Conf))
			MatchMsg(t, tt.Name, e.Msg, tt.Msg)
			if tt.Existing {
				WantLinks(t, hc, "lo", "eth0", "mine0")
			} else {
				WantLinks(t, hc, "lo")
			}
			WantLinks(t, h.H, hostLinks...)
			if got := Reservations(t, dir); len(got) != 0 {
				t.Errorf("reservations %v", got)
			}
			if after != nil {
				after(t, h)
			}
		})
	}
}

// DelEverywhere checks DEL of an attachment made with cfg (host-local in
// dir) is idempotent and tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS (DelAs): IPAM is released in each case, the
// container keeps only lo, and the host ends with hostLinks. again, when
// given, is one more config a repeated DEL (the "twice" case) must accept.
func DelEverywhere(t *testing.T, h *Host, dir, cfg, again string, hostLinks ...string) {
	t.Helper()
	for i, how := range []string{"twice", "netns gone", "interface gone", "empty netns"} {
		id := fmt.Sprint("d", i)
		ctr, destroy := DoomedCtr(t, NoDAD)
		out := h.OK(Cmd("ADD", ctr, id, cfg))
		if len(Reservations(t, dir)) != 1 {
			t.Fatalf("%s: reservations %v", how, Reservations(t, dir))
		}
		c := DelAs(t, how, ctr, destroy, Cmd("DEL", ctr, id, WithPrev(cfg, out)))
		h.OK(c)
		if how == "twice" {
			h.OK(c)
			if again != "" {
				h.OK(Cmd("DEL", ctr, id, again))
			}
		}
		if got := Reservations(t, dir); len(got) != 0 {
			t.Errorf("%s: reservations %v", how, got)
		}
		if how != "empty netns" && how != "netns gone" {
			hc, err := netlinkx.Open(ctr)
			Must(t, err)
			WantLinks(t, hc, "lo")
			hc.Close()
		}
		destroy()
	}
	WantLinks(t, h.H, hostLinks...)
}

// CheckDrift checks CHECK of the attachment made with cfg in ctr (whose
// result was out) fails, with the plugin's messages, when prevResult
// records another MAC (mac: the message up to the container's MAC), another
// sandbox (sandbox: the message up to the namespace's path) or the
// address badAddr instead of the first one. extra are more cases, run
// after those: a config and prevResult each, and the message.
func CheckDrift(t *testing.T, h *Host, ctr *netns.NS, hc *netlinkx.Handle, cfg, out, badAddr, mac, sandbox string, extra ...[4]string) {
	t.Helper()
	edit := func(fn func(m map[string]any)) string { return EditJSON(t, out, fn) }
	cont := func(m map[string]any) map[string]any { return m["interfaces"].([]any)[0].(map[string]any) }
	cmac := MustLink(t, hc, "eth0").MAC.String()
	cases := [][4]string{
		{"mac", cfg, edit(func(m map[string]any) { cont(m)["mac"] = "02:00:00:00:00:99" }),
			mac + cmac},
		{"sandbox", cfg, edit(func(m map[string]any) { cont(m)["sandbox"] = "/other" }),
			sandbox + ctr.Path()},
		{"address", cfg, edit(func(m map[string]any) { m["ips"].([]any)[0].(map[string]any)["address"] = badAddr }),
			"Failed to match addr " + badAddr + " on interface eth0"},
	}
	for _, tc := range append(cases, extra...) {
		h.FailsWith(tc[0], Cmd("CHECK", ctr, "chk", WithPrev(tc[1], tc[2])), tc[3])
	}
}

// CheckReplaced checks check (a CHECK that passed) fails with notFound
// once the container's eth0 is deleted, and with notKind once eth0 is a
// veth.
func CheckReplaced(t testing.TB, h *Host, hc *netlinkx.Handle, check Call, notFound, notKind string) {
	t.Helper()
	Must(t, hc.DeleteLink("eth0"))
	h.FailsWith("eth0 deleted", check, notFound)
	Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "p0"}))
	h.FailsWith("eth0 a veth", check, notKind)
}

// GCKeepsValid ADDs keep and stale (1.1.0 configs with IPAM host-local in
// dir) in containers of their own, then checks GC with only keep's
// attachment valid releases stale's address, and STATUS with keep
// succeeds. noIPAM is the config without IPAM: its GC and STATUS succeed
// when noIPAMErr is empty, else fail with it.
func GCKeepsValid(t *testing.T, h *Host, dir, keep, stale, noIPAM, noIPAMErr string) {
	t.Helper()
	kc, _ := NewCtr(t, NoDAD)
	sc, _ := NewCtr(t, NoDAD)
	h.OK(Cmd("ADD", kc, "keep", keep))
	h.OK(Cmd("ADD", sc, "stale", stale))
	gc := keep[:len(keep)-1] + `,"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]}`
	h.OK(Call{Command: "GC", Stdin: gc})
	if got := Reservations(t, dir); len(got) != 1 {
		t.Errorf("reservations after GC %v", got)
	}
	h.OK(Call{Command: "STATUS", Stdin: keep})
	for _, cmd := range []string{"STATUS", "GC"} {
		c := Call{Command: cmd, Stdin: noIPAM}
		if noIPAMErr == "" {
			h.OK(c)
		} else {
			h.FailsWith(cmd+" without ipam", c, noIPAMErr)
		}
	}
}

// IfNameTakenMsg is the error of an ADD whose CNI_IFNAME already exists in
// the container (a second network on the same name).
const IfNameTakenMsg = `CNI_IFNAME "eth0" already exists in the container's network namespace (another network attached under the same name?): give each network of the container its own interface name, e.g. CNI_IFNAME=eth1`
