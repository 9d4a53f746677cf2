package tuning

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// No privileges needed: decoding, overrides, key handling, the allow-list
// and the backup format.

func TestLoadConf(t *testing.T) {
	for _, tt := range []struct {
		name, conf, args string
		want             func(c *TuningConf) bool
	}{
		{"defaults", `{"name":"n"}`, "", func(c *TuningConf) bool {
			return c.DataDir == DefaultDataDir && c.SysCtl == nil && c.Mac == "" && !c.Promisc && c.MTU == 0 &&
				c.Allmulti == nil && c.TxQLen == nil && !c.changesLink()
		}},
		{"case-insensitive keys", `{"name":"n","SYSCTL":{"a":"1"},"Mtu":1400,"TXQLEN":0,"AllMulti":false,"DataDir":"/x","PROMISC":true}`, "", func(c *TuningConf) bool {
			return c.SysCtl["a"] == "1" && c.MTU == 1400 && *c.TxQLen == 0 && !*c.Allmulti && c.DataDir == "/x" && c.Promisc && c.changesLink()
		}},
		{"txQLen 0 and allmulti false ask for a change", `{"name":"n","txQLen":0}`, "", func(c *TuningConf) bool { return c.changesLink() }},
		{"mac from config", `{"name":"n","mac":"02:00:00:00:00:01"}`, "", func(c *TuningConf) bool { return c.Mac == "02:00:00:00:00:01" }},
		{"CNI_ARGS MAC beats config", `{"name":"n","mac":"02:00:00:00:00:01"}`, "MAC=02:00:00:00:00:02", func(c *TuningConf) bool { return c.Mac == "02:00:00:00:00:02" }},
		{"runtimeConfig beats CNI_ARGS", `{"name":"n","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}}`, "MAC=02:00:00:00:00:02", func(c *TuningConf) bool { return c.Mac == "02:00:00:00:00:03" }},
		{"args.cni beats runtimeConfig", `{"name":"n","runtimeConfig":{"mac":"02:00:00:00:00:03"},"args":{"cni":{"mac":"02:00:00:00:00:04"}}}`, "MAC=02:00:00:00:00:02", func(c *TuningConf) bool { return c.Mac == "02:00:00:00:00:04" }},
		{"empty CNI_ARGS MAC does not override", `{"name":"n","mac":"02:00:00:00:00:01"}`, "MAC=", func(c *TuningConf) bool { return c.Mac == "02:00:00:00:00:01" }},
		{"args.cni overrides link fields", `{"name":"n","promisc":true,"mtu":1400,"allmulti":true,"txQLen":5,"args":{"cni":{"promisc":false,"mtu":1300,"allmulti":false,"txQLen":7}}}`, "", func(c *TuningConf) bool {
			return !c.Promisc && c.MTU == 1300 && !*c.Allmulti && *c.TxQLen == 7
		}},
		{"args.cni sysctl merged key by key", `{"name":"n","sysctl":{"a":"1","b":"2"},"args":{"cni":{"sysctl":{"b":"3","c":"4"}}}}`, "", func(c *TuningConf) bool {
			return len(c.SysCtl) == 3 && c.SysCtl["a"] == "1" && c.SysCtl["b"] == "3" && c.SysCtl["c"] == "4"
		}},
		{"args.cni sysctl without a config sysctl", `{"name":"n","args":{"cni":{"sysctl":{"c":"4"}}}}`, "", func(c *TuningConf) bool { return c.SysCtl["c"] == "4" }},
		{"args without cni", `{"name":"n","mtu":9000,"args":{"other":1}}`, "", func(c *TuningConf) bool { return c.MTU == 9000 }},
		{"IgnoreUnknown", `{"name":"n"}`, "IgnoreUnknown=1;K8S_POD_NAME=x;MAC=02:00:00:00:00:09", func(c *TuningConf) bool { return c.Mac == "02:00:00:00:00:09" }},
	} {
		c, err := loadConf([]byte(tt.conf), tt.args)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !tt.want(c) {
			t.Errorf("%s: %+v", tt.name, c)
		}
	}
}

func TestLoadConfErrors(t *testing.T) {
	for _, tt := range []struct {
		conf, args, want string
	}{
		{`{"name":"n","sysctl":{"net.core.somaxconn":500}}`, "", "failed to load netconf: json: cannot unmarshal number into Go struct field TuningConf.sysctl of type string"},
		{`{"name":"n","mtu":"1400"}`, "", "failed to load netconf: json: cannot unmarshal string into Go struct field TuningConf.mtu of type int"},
		{`{"name":"n","args":{"cni":{"mtu":"x"}}}`, "", "failed to load netconf: json: cannot unmarshal string into Go struct field IPAMArgs.args.cni.mtu of type int"},
		{`{"name":"n"}`, "FOO=bar", `ARGS: unknown args ["FOO=bar"]`},
		{`{"name":"n"}`, "MAC", `ARGS: invalid pair "MAC"`},
		{`{"name":"n"}`, "mac=02:00:00:00:00:01", `ARGS: unknown args ["mac=02:00:00:00:00:01"]`},
	} {
		if _, err := loadConf([]byte(tt.conf), tt.args); err == nil || err.Error() != tt.want {
			t.Errorf("%s %s: %v\n want %s", tt.conf, tt.args, err, tt.want)
		}
	}
}

func TestCheckDuplicateSysctls(t *testing.T) {
	for _, tt := range []struct {
		conf, want string
	}{
		{`{"name":"n"}`, ""},
		{`{"name":"n","sysctl":null}`, ""},
		{`{"name":"n","sysctl":{"a":"1","b":"1"}}`, ""},
		{`{"name":"n","sysctl":{"a":"1","a":"2"}}`, "duplicated sysctl keys are not allowed"},
		{`{"name":"n","sysctl":{"a":"1"},"SysCtl":{"a":"2"}}`, "duplicated sysctl keys are not allowed"},
		{`{"name":"n","sysctl":{"a":"1"},"SysCtl":{"b":"2"}}`, ""},
		// Only the top-level object is looked at.
		{`{"name":"n","args":{"cni":{"sysctl":{"a":"1","a":"2"}}}}`, ""},
		{`{"name":"n","sysctl":{"a":1}}`, "json: cannot unmarshal number into Go struct field sysctlCheck.sysctl of type string"},
	} {
		err := checkDuplicateSysctls([]byte(tt.conf))
		if got := errText(err); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.conf, got, tt.want)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestSysctlFile(t *testing.T) {
	for _, tt := range []struct {
		key, ifName, want, err string
	}{
		{"net.core.somaxconn", "eth0", "/proc/sys/net/core/somaxconn", ""},
		{"net/core/somaxconn", "eth0", "/proc/sys/net/core/somaxconn", ""},
		{"net.ipv4.conf.IFNAME.arp_filter", "eth0", "/proc/sys/net/ipv4/conf/eth0/arp_filter", ""},
		// Dots become slashes before IFNAME is replaced: a VLAN-style
		// interface name survives, a literal one in the key does not.
		{"net.ipv4.conf.IFNAME.arp_filter", "eth0.100", "/proc/sys/net/ipv4/conf/eth0.100/arp_filter", ""},
		{"net/ipv4/conf/eth0.100/arp_filter", "x", "/proc/sys/net/ipv4/conf/eth0/100/arp_filter", ""},
		// Only the first IFNAME.
		{"net.IFNAME.IFNAME", "e1", "/proc/sys/net/e1/IFNAME", ""},
		{"net.ipv4.conf.all..forwarding", "eth0", "/proc/sys/net/ipv4/conf/all/forwarding", ""},
		{"net/./core/somaxconn", "eth0", "/proc/sys/net/core/somaxconn", ""},
		{"net...core.somaxconn", "eth0", "/proc/sys/net/core/somaxconn", ""},
		// A ".." element as written is refused, naming the key as written
		// (the reference would write net/core/somaxconn here).
		{"net/../net/core/somaxconn", "eth0", "", `invalid net sysctl key: "net/../net/core/somaxconn"`},
		{"../net/core/somaxconn", "eth0", "", `invalid net sysctl key: "../net/core/somaxconn"`},
		{"net.core/..", "eth0", "", `invalid net sysctl key: "net.core/.."`},
		{"net..", "eth0", "", `invalid net sysctl key: "net//"`},
		{"kernel.hostname", "eth0", "", `invalid net sysctl key: "kernel/hostname"`},
		{"net", "eth0", "", `invalid net sysctl key: "net"`},
		{"net.", "eth0", "", `invalid net sysctl key: "net/"`},
		{"", "eth0", "", `invalid net sysctl key: ""`},
		{"net/../kernel/hostname", "eth0", "", `invalid net sysctl key: "net/../kernel/hostname"`},
		{"net/../../etc/passwd", "eth0", "", `invalid net sysctl key: "net/../../etc/passwd"`},
		{"/etc/passwd", "eth0", "", `invalid net sysctl key: "/etc/passwd"`},
		{"netfilter.x", "eth0", "", `invalid net sysctl key: "netfilter/x"`},
		{"net.core.x\x00y", "eth0", "", `invalid net sysctl key: "net/core/x\x00y"`},
	} {
		got, err := sysctlFile(tt.key, tt.ifName)
		if got != tt.want || errText(err) != tt.err {
			t.Errorf("%q (%s): %q %v, want %q %q", tt.key, tt.ifName, got, err, tt.want, tt.err)
		}
	}
}

// TestPlanSysctls: keys come out sorted, and one bad key fails the whole
// plan.
func TestPlanSysctls(t *testing.T) {
	c := &TuningConf{SysCtl: map[string]string{"net.ipv4.b": "2", "net.core.a": "1", "net.IFNAME.c": "3"}}
	plan, err := planSysctls(c, "eth1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range plan {
		got = append(got, e.key+"="+e.value+"@"+e.file)
	}
	want := []string{"net.IFNAME.c=3@/proc/sys/net/eth1/c", "net.core.a=1@/proc/sys/net/core/a", "net.ipv4.b=2@/proc/sys/net/ipv4/b"}
	if !slices.Equal(got, want) {
		t.Errorf("plan %q\n want %q", got, want)
	}
	c.SysCtl["net/../vm/x"] = "1"
	if _, err := planSysctls(c, "eth1"); errText(err) != `invalid net sysctl key: "net/../vm/x"` {
		t.Errorf("bad key: %v", err)
	}
}

func TestAllowlist(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "allowlist.conf")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, ok, err := readAllowlist(filepath.Join(dir, "missing")); ok || err != nil {
		t.Errorf("missing file: %v %v", ok, err)
	}
	const list = "  ^net\\.core\\.somaxconn$  \n\nnet\\.ipv4\\.conf\\.IFNAME\\.[a-z_]*\n\tnet.ipv6 \n"
	al, ok, err := readAllowlist(write(list))
	if !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	const msg = `Sysctl %s is not allowed. Only the following sysctls are allowed: [^net\.core\.somaxconn$ net\.ipv4\.conf\.IFNAME\.[a-z_]* net.ipv6]`
	for _, tt := range []struct {
		keys []string
		bad  string
	}{
		{[]string{"net.core.somaxconn", "net.ipv4.conf.IFNAME.arp_filter", "net.ipv6"}, ""},
		{nil, ""},
		// Anchored: a pattern must match the whole key.
		{[]string{"net.ipv6.conf.all.forwarding"}, "net.ipv6.conf.all.forwarding"},
		{[]string{"net.core.somaxconn2"}, "net.core.somaxconn2"},
		{[]string{"x.net.ipv4.conf.IFNAME.arp_filter"}, "x.net.ipv4.conf.IFNAME.arp_filter"},
		// The first refused key in sorted order is named.
		{[]string{"net.core.somaxconn", "net.a", "net.b"}, "net.a"},
	} {
		err := al.check(tt.keys)
		want := ""
		if tt.bad != "" {
			want = strings.Replace(msg, "%s", tt.bad, 1)
		}
		if errText(err) != want {
			t.Errorf("%v: %v\n want %s", tt.keys, err, want)
		}
	}
	if _, _, err := readAllowlist(write("net.(core\n")); errText(err) != "error parsing regexp: missing closing ): `net.(core`" {
		t.Errorf("bad pattern: %v", err)
	}
	// An empty file allows nothing.
	al, ok, err = readAllowlist(write("\n \n"))
	if !ok || err != nil || al.check([]string{"net.core.somaxconn"}) == nil {
		t.Errorf("empty allow-list: %v %v %+v", ok, err, al)
	}
}

func TestValidateLink(t *testing.T) {
	for _, tt := range []struct {
		conf, want string
	}{
		{`{"mac":"02:00:00:00:00:01","mtu":1500,"txQLen":0}`, ""},
		{`{"mac":"02-00-00-00-00-01"}`, ""},
		{`{"mac":"zz"}`, "invalid args zz for MAC addr: address zz: invalid MAC address"},
		{`{"mtu":-1}`, "invalid mtu -1: must not be negative"},
		{`{"txQLen":-1}`, "invalid txQLen -1: must be between 0 and 4294967295"},
		{`{"txQLen":4294967296}`, "invalid txQLen 4294967296: must be between 0 and 4294967295"},
	} {
		var c TuningConf
		if err := json.Unmarshal([]byte(tt.conf), &c); err != nil {
			t.Fatal(err)
		}
		if got := errText(c.validateLink()); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.conf, got, tt.want)
		}
	}
}

// TestBackupFormat: the file's exact bytes (the reference's keys, order and
// indent, plus our network key), and a reference-written file reads back.
func TestBackupFormat(t *testing.T) {
	b := backup{Mac: "02:00:00:00:00:01", Promisc: ptr(false), MTU: 1500, Allmulti: ptr(true), TxQLen: ptr(0), Network: "net1"}
	want := "{\n \"mac\": \"02:00:00:00:00:01\",\n \"promisc\": false,\n \"mtu\": 1500,\n \"allmulti\": true,\n \"txQLen\": 0,\n \"network\": \"net1\"\n}"
	if got := string(b.encode()); got != want {
		t.Errorf("encoded\n%s\nwant\n%s", got, want)
	}
	if got := string((backup{MTU: 9000}).encode()); got != "{\n \"mtu\": 9000\n}" {
		t.Errorf("only mtu: %s", got)
	}
	var r backup
	if err := json.Unmarshal([]byte("{\n \"mac\": \"aa:bb:cc:dd:ee:ff\",\n \"promisc\": true\n}"), &r); err != nil ||
		r.Mac != "aa:bb:cc:dd:ee:ff" || r.Promisc == nil || !*r.Promisc || r.Allmulti != nil || r.TxQLen != nil || r.Network != "" {
		t.Errorf("reference file: %+v %v", r, err)
	}
	if name := backupName("c1", "eth0"); name != "c1_eth0.json" {
		t.Errorf("name %s", name)
	}
}

// TestCollect: GC removes only this network's backups of attachments not
// kept; other networks', the reference's, temporary files and anything
// else stay.
func TestCollect(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"keep_eth0.json":           string(backup{MTU: 1, Network: "net1"}.encode()),
		"stale_eth0.json":          string(backup{MTU: 1, Network: "net1"}.encode()),
		"stale_net1.json":          string(backup{TxQLen: ptr(1), Network: "net1"}.encode()),
		"other_eth0.json":          string(backup{MTU: 1, Network: "net2"}.encode()),
		"reference_eth0.json":      "{\n \"mtu\": 1500\n}",
		"garbage_eth0.json":        "{",
		".stale_eth0.json.tmp1234": string(backup{MTU: 1, Network: "net1"}.encode()),
		"notes.txt":                string(backup{MTU: 1, Network: "net1"}.encode()),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := collect(dir, "net1", map[string]bool{"keep_eth0.json": true}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{".stale_eth0.json.tmp1234", "garbage_eth0.json", "keep_eth0.json", "notes.txt", "other_eth0.json", "reference_eth0.json"}
	if !slices.Equal(got, want) {
		t.Errorf("left %q\n want %q", got, want)
	}
	if err := collect(filepath.Join(dir, "missing"), "net1", nil); err != nil {
		t.Errorf("missing dir: %v", err)
	}
}

// TestWriteFileAtomic: the directory gets mode 0700, the file 0600, and a
// rewrite replaces the content without leaving temporary files.
func TestWriteFileAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "tuning")
	for _, content := range []string{"first", "second"} {
		if err := writeFileAtomic(dir, "c_eth0.json", []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v %v", st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("entries %v", entries)
	}
	p := filepath.Join(dir, "c_eth0.json")
	data, err := os.ReadFile(p)
	st2, _ := os.Stat(p)
	if string(data) != "second" || err != nil || st2.Mode().Perm() != 0o600 {
		t.Errorf("file %q %v mode %v", data, err, st2.Mode())
	}
}
