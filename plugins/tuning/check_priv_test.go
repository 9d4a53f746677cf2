package tuning

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/sysctl"
)

// TestCheck: CHECK passes right after ADD and fails, naming the value,
// once anything it checks has been changed behind the plugin's back; it
// passes again once the change is undone.
func TestCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conf := e.conf("1.0.0", allFields)
	e.th.OK(e.call("ADD", "c1", conf))
	check := e.call("CHECK", "c1", conf)
	e.th.OK(check)

	sysctl := func(k, v string) func() error { return func() error { return sysctl.Set(e.ctr, k, v) } }
	for _, tt := range []struct {
		name         string
		tamper, undo func() error
		want         string
	}{
		{"sysctl", sysctl("net/core/somaxconn", "4096"), sysctl("net/core/somaxconn", "1234"),
			"Error: Tuning configured value of /proc/sys/net/core/somaxconn is 1234, current value is 4096"},
		{"IFNAME sysctl", sysctl("net/ipv4/conf/eth0/arp_filter", "0"), sysctl("net/ipv4/conf/eth0/arp_filter", "1"),
			"Error: Tuning configured value of /proc/sys/net/ipv4/conf/eth0/arp_filter is 1, current value is 0"},
		{"multi-value sysctl", sysctl("net/ipv4/ping_group_range", "0 101"), sysctl("net/ipv4/ping_group_range", "0 100"),
			"Error: Tuning configured value of /proc/sys/net/ipv4/ping_group_range is 0\t100, current value is 0\t101"},
		{"mac", func() error { return e.hc.SetMAC("eth0", mustMAC(t, "02:00:00:00:00:99")) },
			func() error { return e.hc.SetMAC("eth0", mustMAC(t, "02:ab:cd:ef:00:01")) },
			"Error: Tuning configured Ethernet of eth0 is 02:AB:CD:EF:00:01, current value is 02:00:00:00:00:99"},
		{"promisc", func() error { return e.hc.SetPromisc("eth0", false) }, func() error { return e.hc.SetPromisc("eth0", true) },
			"Error: Tuning link eth0 configured promisc is true, current value is 0"},
		{"mtu", func() error { return e.hc.SetMTU("eth0", 1500) }, func() error { return e.hc.SetMTU("eth0", 1400) },
			"Error: Tuning configured MTU of eth0 is 1400, current value is 1500"},
		{"allmulti", func() error { return e.hc.SetAllMulti("eth0", false) }, func() error { return e.hc.SetAllMulti("eth0", true) },
			"Error: Tuning configured all-multicast mode of eth0 is true, current value is false"},
		{"txqueuelen", func() error { return e.hc.SetTxQueueLen("eth0", 0) }, func() error { return e.hc.SetTxQueueLen("eth0", 42) },
			"Error: Tuning configured Transmit Queue Length of eth0 is 42, current value is 0"},
	} {
		plugintest.Must(t, tt.tamper())
		if ee := e.th.Fail(check); ee.Code != 999 || ee.Msg != tt.want {
			t.Errorf("%s: %d %q\n want %q", tt.name, ee.Code, ee.Msg, tt.want)
		}
		plugintest.Must(t, tt.undo())
		e.th.OK(check)
	}

	if ee := e.th.Fail(e.call("CHECK", "c1", e.conf("0.3.1", allFields))); ee.Code != 1 || ee.Msg != "config version does not allow CHECK" {
		t.Errorf("0.3.1: %+v", ee)
	}
}

// TestCheckLink: CHECK of link attributes alone. Promisc is two-sided as in
// the reference (not asked for: must be off); MACs compare as addresses.
func TestCheckLink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conf := e.conf("1.1.0", `,"mac":"02:AB:cd:EF:00:05"`)
	e.th.OK(e.call("ADD", "c1", conf))
	e.th.OK(e.call("CHECK", "c1", conf))
	// The link exists, nothing asked for: passes.
	e.th.OK(e.call("CHECK", "c1", e.conf("1.1.0", "")))

	plugintest.Must(t, e.hc.SetPromisc("eth0", true))
	if ee := e.th.Fail(e.call("CHECK", "c1", conf)); ee.Msg != "Error: Tuning link eth0 configured promisc is false, current value is 1" {
		t.Errorf("promisc not asked for: %+v", ee)
	}
	plugintest.Must(t, e.hc.SetPromisc("eth0", false))

	c := e.call("CHECK", "c1", e.conf("1.1.0", ""))
	c.IfName = "eth9"
	if ee := e.th.Fail(c); ee.Msg != "Cannot find container link eth9" {
		t.Errorf("missing link: %+v", ee)
	}
	if ee := e.th.Fail(e.call("CHECK", "c1", e.conf("1.1.0", `,"sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}`))); ee.Msg != "duplicated sysctl keys are not allowed" {
		t.Errorf("duplicates: %+v", ee)
	}
	if ee := e.th.Fail(e.call("CHECK", "c1", e.conf("1.1.0", `,"sysctl":{"kernel.hostname":"x"}`))); ee.Msg != `invalid net sysctl key: "kernel/hostname"` {
		t.Errorf("bad key: %+v", ee)
	}
}
