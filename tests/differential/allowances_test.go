package differential

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/nftcni/nftcni/internal/guest"
)

// An allowance is a difference from the reference that is meant: the
// plugin's README says so, with the reason, under its differences section.
type allowance struct {
	// readme is the page (relative to the repository root) whose
	// differences section documents it.
	readme string
	// scenario matches the full names ("bridge/ipMasq") of the scenarios
	// where the difference is expected.
	scenario string
	// key matches the difference's key ("after ADD host link <veth1>
	// txqlen").
	key string
	// doc is text the README's differences section contains (whitespace
	// aside), the place a reader finds the reason.
	doc string
	// reason, in a few words, for the test log.
	reason string
	// only narrows it to differences where that side is as it was before
	// the ADD: "ours" (the reference left something behind, or changed
	// what we do not) or "reference" (we do what it does not).
	only string
	// sometimes marks a difference that shows only when the reference
	// loses a race of its own: an allowance that matched nothing in a run
	// is then not stale.
	sometimes bool
}

// Readme pages.
const (
	bridgeDoc    = "plugins/bridge/README.md"
	ptpDoc       = "plugins/ptp/README.md"
	hostDevDoc   = "plugins/hostdevice/README.md"
	loopbackDoc  = "plugins/loopback/README.md"
	tapDoc       = "plugins/tap/README.md"
	hostLocalDoc = "ipam/hostlocal/README.md"
	bandwidthDoc = "plugins/bandwidth/README.md"
	tuningDoc    = "plugins/tuning/README.md"
	dhcpDoc      = "ipam/dhcp/README.md"
	portmapDoc   = "plugins/portmap/README.md"
	vlanDoc      = "plugins/vlan/README.md"
	vrfDoc       = "plugins/vrf/README.md"
	macvlanDoc   = "plugins/macvlan/README.md"
	ipvlanDoc    = "plugins/ipvlan/README.md"
	dummyDoc     = "plugins/dummy/README.md"
	sbrDoc       = "plugins/sbr/README.md"
)

// Scenario groups: those whose chain starts with a bridge, with a ptp,
// with host-device.
const (
	bridgeHeaded  = `bridge/.*|portmap/.*|firewall/(bridge.*|ingressPolicy.*|under a FORWARD drop policy)|sbr/(bridge.*|gateways.*|addSourceHints)|dhcp/.*bridge.*`
	hostDevHeaded = `hostdevice/.*|dhcp/lease (on host-device|0.4.0.*)`
)

var allowances = []allowance{
	// host-local
	{readme: hostLocalDoc, scenario: `.*`, only: "reference",
		key:    `after (ADD|DEL) files file ipam/diffnet/\.nftcni-owner\..*`,
		doc:    "reads only the files whose owner link names the container",
		reason: "owner links index the reservations"},

	// bridge
	{readme: bridgeDoc, scenario: `.*`,
		key:    `after (ADD|DEL) host addr cni0 fd22::1/64 flags`,
		doc:    "IPv6 gateway added with `nodad`",
		reason: "the IPv6 gateway is usable at once"},
	{readme: bridgeDoc, scenario: bridgeHeaded,
		key:    `after ADD ctr sysctl net/ipv6/conf/eth0 ndisc_notify`,
		doc:    "`arp_notify`/`ndisc_notify` plus a `NETDEV_CHANGEADDR`",
		reason: "neighbours learn the address at once"},
	{readme: bridgeDoc, scenario: `bridge/vlan`,
		key:    `output bridge ADD \.interfaces\[\d+\]\.mac|after (ADD|DEL) host (link (cni0|<veth\d+>) mac|addr (cni0|<veth\d+>) fe80::.*|fdb (cni0|<veth\d+>) .*|route local local fe80::.*)`,
		doc:    "the bridge's MAC is pinned too, as when the gateway is on the bridge itself",
		reason: "the bridge's MAC stays under CHECK"},
	{readme: bridgeDoc, scenario: `bridge/existing bridge that lost its ports`,
		key:    `after (ADD|DEL) host (addr cni0 fe80::.*|route local local fe80::.* dev cni0)`,
		doc:    "derived from whichever of the two it has when its carrier comes back (a matter of timing)",
		reason: "the reference's link-local address depends on timing; ours is the bridge's own", sometimes: true},
	{readme: bridgeDoc, scenario: `bridge/(bridge name too long|bad subnet)`,
		key:    `answer ADD ctr|output bridge ADD \.code`,
		doc:    "code 7 naming the key and the fix",
		reason: "config mistakes are config errors"},
	{readme: bridgeDoc, scenario: `bridge/bad subnet`, only: "ours",
		key:    `after (ADD|DEL) .*`,
		doc:    "the bridge is created first and left behind",
		reason: "a refused ADD leaves the host as it was"},
	{readme: bridgeDoc, scenario: `bridge/bad ipMasqBackend`, only: "ours",
		key:    `after (ADD|DEL) .*`,
		doc:    "`ipMasqBackend`, bad MAC | checked after the container is plumbed",
		reason: "checked before anything is done"},
	{readme: bridgeDoc, scenario: `bridge/existing bridge address conflict`, only: "ours",
		key:    `after (ADD|DEL) .*`,
		doc:    "the configured container veth stays",
		reason: "a failed ADD undoes what it did"},
	{readme: bridgeDoc, scenario: `bridge/existing bridge address conflict`,
		key:    `after ADD host link cni0 (mac|carrier|operstate)|after ADD host route .* dev cni0 flags`,
		doc:    "the kernel sets its MAC to all zeros and its carrier off",
		reason: "the port the failed ADD made is gone again"},

	// ptp
	{readme: ptpDoc, scenario: `.*`,
		key:    `after ADD host addr <veth\d+> fd22::1/128 flags`,
		doc:    "gateway address on the host end | added with IPv6 duplicate address detection | added with `nodad`",
		reason: "the container's IPv6 gateway is usable at once"},
	{readme: ptpDoc, scenario: `ptp/no gateway`, only: "ours",
		key:    `after (ADD|DEL) .*`,
		doc:    "refused up front: `IPAM result address <a> has no gateway, which ptp requires`",
		reason: "nothing half-done"},

	{readme: ptpDoc, scenario: `ptp/IPAM config mistake`,
		key:    `answer ADD ctr|output ptp ADD \.code`,
		doc:    "checked before anything: code 7 naming the key and the fix",
		reason: "a message the user can act on"},

	// The interface plugins that check a host-local or static config of
	// this binary before creating anything.
	{readme: macvlanDoc, scenario: `macvlan/IPAM config mistake`,
		key:    `answer ADD ctr|output macvlan ADD \.code`,
		doc:    "found before anything is created: code 7 naming the key",
		reason: "a message the user can act on"},
	{readme: macvlanDoc, scenario: `macvlan/IPAM config mistake`, only: "ours",
		key:    `after ADD .*`,
		doc:    "after the macvlan was made, which stays (down) in the container",
		reason: "nothing to undo"},
	{readme: macvlanDoc, scenario: `macvlan/IPAM config mistake`, only: "ours",
		key:    `after DEL .*`,
		doc:    "DEL after an IPAM DEL error | stops | goes on deleting the link",
		reason: "clean up what can be"},
	{readme: ipvlanDoc, scenario: `ipvlan/IPAM config mistake`,
		key:    `answer ADD ctr|output ipvlan ADD \.code`,
		doc:    "found before anything is created: code 7 naming the key",
		reason: "a message the user can act on"},
	{readme: ipvlanDoc, scenario: `ipvlan/IPAM config mistake`, only: "ours",
		key:    `after ADD .*`,
		doc:    "after the ipvlan was made, which stays in the container",
		reason: "nothing to undo"},
	{readme: ipvlanDoc, scenario: `ipvlan/IPAM config mistake`, only: "ours",
		key:    `after DEL .*`,
		doc:    "DEL after an IPAM DEL error | stops | goes on deleting the link",
		reason: "clean up what can be"},
	{readme: vlanDoc, scenario: `vlan/IPAM config mistake`,
		key:    `answer ADD ctr|output vlan ADD \.code`,
		doc:    "found before anything is created: code 7 naming the key",
		reason: "a message the user can act on"},
	{readme: vlanDoc, scenario: `vlan/IPAM config mistake`, only: "ours",
		key:    `after ADD .*`,
		doc:    "after the VLAN link was made, which stays in the container",
		reason: "nothing to undo"},
	{readme: vlanDoc, scenario: `vlan/IPAM config mistake`, only: "ours",
		key:    `after DEL .*`,
		doc:    "DEL after an IPAM DEL error | stops | goes on deleting the link",
		reason: "clean up what can be"},
	{readme: dummyDoc, scenario: `dummy/IPAM config mistake`,
		key:    `answer ADD ctr|output dummy ADD \.code`,
		doc:    "found before anything is created: code 7 naming the key",
		reason: "a message the user can act on"},
	{readme: tapDoc, scenario: `tap/IPAM config mistake`,
		key:    `answer ADD ctr|output tap ADD \.code`,
		doc:    "found before anything is created: code 7 naming the key",
		reason: "a message the user can act on"},
	{readme: tapDoc, scenario: `tap/IPAM config mistake`, only: "ours",
		key:    `after ADD .*`,
		doc:    "after the tap was made, which stays in the container",
		reason: "nothing to undo"},
	{readme: tapDoc, scenario: `tap/IPAM config mistake`, only: "ours",
		key:    `after DEL .*`,
		doc:    "DEL after an IPAM DEL error (an IPAM config that no longer parses, say) | stops: the tap stays",
		reason: "clean up what can be"},
	{readme: hostDevDoc, scenario: `hostdevice/IPAM config mistake`,
		key:    `answer ADD ctr|output host-device ADD \.code`,
		doc:    "found before anything is moved: code 7 naming the key",
		reason: "a message the user can act on"},

	// loopback
	{readme: loopbackDoc, scenario: `loopback/0\.(2\.0|3\.1)`,
		key:    `output loopback ADD \..*`,
		doc:    "converted to the shape of the config's version",
		reason: "the result has the shape its version names"},

	// tap
	{readme: tapDoc, scenario: `tap/multiQueue owner group`,
		key:    `after ADD ctr link eth0 data\.vnet_hdr`,
		doc:    "`pi off, vnet_hdr on` (netlink path)",
		reason: "one set of flags whatever the config; the consumer chooses when attaching"},

	// host-device
	{readme: hostDevDoc, scenario: `hostdevice/DEL after the netns is gone`,
		key:    `answer DEL( again)? ctr|output host-device DEL (exit|\.code)`,
		doc:    "DEL, namespace gone | error | success",
		reason: "DEL must succeed when state is gone"},
	{readme: hostDevDoc, scenario: hostDevHeaded,
		key:    `answer DEL( again)? ctr|output host-device DEL (exit|\.code)`,
		doc:    "DEL, interface gone (second DEL) | `failed to find \"<if>\" in containerNS` | success",
		reason: "DEL is idempotent"},
	{readme: hostDevDoc, scenario: hostDevHeaded, only: "ours",
		key:    `after DEL host .*`,
		doc:    "recorded at ADD (`stateDir`) and restored",
		reason: "the device is given back as it was"},
	{readme: hostDevDoc, scenario: `hostdevice/IPAM config mistake`, only: "ours",
		key:    `after (ADD|DEL) .*`,
		doc:    "after the device was moved into the container, where it stays",
		reason: "a failed ADD gives the device back"},
	{readme: hostDevDoc, scenario: `hostdevice/useInterfaceNetwork.*`,
		key:    `answer CHECK ctr|output host-device CHECK (exit|\.code)`,
		doc:    "`useInterfaceNetwork`: CHECK | fails for every result route with a `table` other than main",
		reason: "CHECK of such an attachment can pass"},
	{readme: hostDevDoc, scenario: `hostdevice/useInterfaceNetwork.*`,
		key:    `after ADD ctr addr eth0 fd22::5/64 flags`,
		doc:    "`useInterfaceNetwork`: IPv6 addresses in the container | added with duplicate address detection",
		reason: "the container can use them at once"},
	{readme: hostDevDoc, scenario: `hostdevice/useInterfaceNetwork.*`, only: "ours",
		key:    `after DEL ctr rule .*`,
		doc:    "`useInterfaceNetwork`: DEL | the copied rules stay in the container",
		reason: "DEL leaves nothing behind"},
	{readme: hostDevDoc, scenario: `hostdevice/no selector`,
		key:    `answer (ADD|DEL|DEL again) ctr|output host-device (ADD|DEL) \.code`,
		doc:    "code 7 (invalid network config), same text",
		reason: "a config error"},

	// dhcp
	{readme: dhcpDoc, scenario: `dhcp/lease through a bridge`,
		key:    `output bridge ADD \.dns\..*`,
		doc:    "result `dns` | never | from options 6, 15, 119",
		reason: "the spec's result has the field"},

	// portmap
	{readme: portmapDoc, scenario: `portmap/.*`,
		key:    `after DEL host sysctl net/ipv4/conf/cni0 route_localnet`,
		doc:    "| `route_localnet` | set on ADD, never reverted |",
		reason: "the interface gets its value back"},
	{readme: portmapDoc, scenario: `portmap/under a FORWARD drop policy`,
		key:    `probe`,
		doc:    "a FORWARD DROP policy (Docker, kube-proxy), set before or after ADD | host ports dropped (no filter rule)",
		reason: "a mapping the host's firewall drops does not work"},

	{readme: dhcpDoc, scenario: `dhcp/daemon not running`,
		key:    `answer STATUS|output host-device STATUS (exit|\.code)`,
		doc:    "STATUS | always success | code 50 when the daemon is unreachable",
		reason: "ADD would fail"},
	{readme: dhcpDoc, scenario: `dhcp/daemon not running`,
		key:    `answer DEL( again)? ctr|output host-device DEL (exit|\.code)`,
		doc:    "DEL, daemon down | error; the runtime retries DEL forever | success, note on stderr",
		reason: "releasing a DHCP lease is not critical"},
	{readme: hostDevDoc, scenario: `dhcp/daemon not running`, only: "ours",
		key:    `after (ADD|DEL) .*`,
		doc:    "device left in the container",
		reason: "a failed ADD gives the device back"},

	// bandwidth
	{readme: bandwidthDoc, scenario: `bandwidth/.*`,
		key:    `after ADD host filter <veth\d+> parent fffffff1 #\d+ U32\.Actions\[1\]\..*`,
		doc:    "the same redirect encoded twice",
		reason: "the second copy is unreachable"},
	{readme: bandwidthDoc, scenario: `bandwidth/.*`,
		key:    `after ADD host link <ifb1> ifalias`,
		doc:    "alias `nftcni bandwidth <owner tag>`",
		reason: "GC can tell whose IFB it is"},
	{readme: bandwidthDoc, scenario: `bandwidth/.*`,
		key:    `after ADD host link <ifb1> name`,
		doc:    "IFB name | ignores `CNI_IFNAME` | includes it",
		reason: "two shaped interfaces of a container do not collide"},
	{readme: bandwidthDoc, scenario: `bandwidth/rate without burst`,
		key:    `answer DEL( again)? ctr|output bandwidth DEL (exit|\.code)|calls|call \d+`,
		doc:    "validates the limits (invalid ones make DEL fail)",
		reason: "DEL never fails over values that could not have been applied"},
	{readme: bandwidthDoc, scenario: `bandwidth/rate without burst`, only: "ours",
		key:    `after DEL .*`,
		doc:    "validates the limits (invalid ones make DEL fail)",
		reason: "the reference's failed DEL leaves the chain's state"},

	// vlan
	{readme: vlanDoc, scenario: `vlan/(bad vlanId|mtu above master)`,
		key:    `answer DEL( again)? ctr|output vlan DEL (exit|\.code)`,
		doc:    "the config must pass ADD's checks",
		reason: "DEL must always be able to release"},
	{readme: vlanDoc, scenario: `vlan/(bad vlanId|mtu above master)`,
		key:    `after DEL files (dir ipam|dir ipam/diffnet|file ipam/diffnet/lock)`,
		doc:    "else DEL fails (and never reaches IPAM)",
		reason: "our DEL reaches host-local, which makes its store"},

	// sbr
	{readme: sbrDoc, scenario: `sbr/gateways, two of a family`,
		key:    `answer ADD ctr|output sbr ADD \.code`,
		doc:    "code 7 in ADD and CHECK, with or without `table`",
		reason: "a bad gateways list is a config error"},
	{readme: sbrDoc, scenario: `sbr/gateways`,
		key:    `after ADD ctr route 10[01] unicast default6? tos 0 metric \d* dev eth0 gateway`,
		doc:    "the configured gateway's default route stays",
		reason: "the reference's copy of the main table's default route replaced the configured gateway's"},
	{readme: sbrDoc, scenario: `sbr/addSourceHints`,
		key:    `after ADD ctr route main unicast 10\.22\.0\.0/24 tos 0 metric  dev eth0 proto`,
		doc:    "the hint is set in place and the route keeps its protocol (`kernel`)",
		reason: "the connected route stays the kernel's"},
	{readme: sbrDoc, scenario: `sbr/addSourceHints`, only: "reference",
		key:    `after ADD ctr route main unicast fe80::<iid>/64 tos 0 metric 256 dev eth0`,
		doc:    "link-local destinations stay reachable through the main table",
		reason: "the reference removes every IPv6 route of the interface from main"},

	// vrf
	{readme: vrfDoc, scenario: `vrf/no vrfname`,
		key:    `answer (ADD|DEL|DEL again) ctr|output vrf (ADD|DEL) \.code`,
		doc:    "no `vrfname` | code 999 | code 7",
		reason: "a config error"},

	// tuning
	{readme: tuningDoc, scenario: `tuning/.*`,
		key:    `after ADD files file tuning/.*\.json content`,
		doc:    "backup content | reference keys | the same plus `network`",
		reason: "GC must not collect another network's backups"},
	{readme: tuningDoc, scenario: `tuning/args sysctl without sysctl`,
		key: `answer (ADD|CHECK|DEL|DEL again) ctr|output tuning (ADD|DEL) .*|calls|call \d+|` +
			`after ADD ctr sysctl net/ipv4/conf/eth0 rp_filter|after ADD files (dir tuning|file tuning/.*)`,
		doc:    "crashes (write into a nil map)",
		reason: "a reference bug"},
	{readme: tuningDoc, scenario: `tuning/args sysctl without sysctl`, only: "ours",
		key:    `after DEL .*`,
		doc:    "crashes (write into a nil map)",
		reason: "the reference's crashing DEL leaves the chain's state"},
}

var (
	usedMu sync.Mutex
	used   = map[int]bool{}
)

// allowed finds the allowance for a difference in a scenario.
func allowed(full string, d difference) (int, bool) {
	for i, a := range allowances {
		if !regexp.MustCompile(`^(?:`+a.scenario+`)$`).MatchString(full) ||
			!regexp.MustCompile(`^(?:`+a.key+`)$`).MatchString(d.key) {
			continue
		}
		if (a.only == "ours" && !d.oursAsBefore) || (a.only == "reference" && !d.refAsBefore) {
			continue
		}
		return i, true
	}
	return 0, false
}

// report fails the test for every difference no allowance covers.
func report(t *testing.T, sc *scenario, ds []difference) {
	t.Helper()
	full := sc.plugin + "/" + sc.name
	for _, d := range ds {
		i, ok := allowed(full, d)
		if !ok {
			t.Errorf("undocumented difference: %s", d)
			continue
		}
		usedMu.Lock()
		used[i] = true
		usedMu.Unlock()
		t.Logf("documented difference (%s: %s): %s", allowances[i].readme, allowances[i].reason, d)
	}
}

// differencesSection is the part of a README under its differences
// heading, up to the next heading of the same level, whitespace folded.
func differencesSection(t *testing.T, readme string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", readme))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "## ") {
			in = strings.HasPrefix(l, "## Differences from the reference") || strings.HasPrefix(l, "## Where we differ")
			continue
		}
		if in {
			out = append(out, l)
		}
	}
	if out == nil {
		t.Errorf("%s has no differences section (## Differences from the reference)", readme)
	}
	return strings.Join(strings.Fields(strings.Join(out, " ")), " ")
}

// TestAllowancesDocumented checks that every allowance's reason is in its
// README's differences section, and that its patterns compile.
func TestAllowancesDocumented(t *testing.T) {
	if guest.InGuest() {
		t.Skip("the README pages are checked on the host (the guest has no sources)")
	}
	sections := map[string]string{}
	for _, a := range allowances {
		regexp.MustCompile(a.scenario)
		regexp.MustCompile(a.key)
		if _, ok := sections[a.readme]; !ok {
			sections[a.readme] = differencesSection(t, a.readme)
		}
		doc := strings.Join(strings.Fields(a.doc), " ")
		if doc == "" || !strings.Contains(sections[a.readme], doc) {
			t.Errorf("%s: its differences section does not say %q (allowance for %s, %s)", a.readme, a.doc, a.scenario, a.key)
		}
		if a.reason == "" {
			t.Errorf("allowance %s %s has no reason", a.scenario, a.key)
		}
	}
}
