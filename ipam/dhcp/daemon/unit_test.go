package daemon

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/insomniacslk/dhcp/rfc1035label"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

func TestParseRequest(t *testing.T) {
	id := append([]byte{0}, "c1/net1/eth0"...)
	tests := []struct {
		name string
		ipam string // the ipam object; "" for none
		args string // CNI_ARGS
		want params
		prio int
		err  string
	}{
		{name: "no ipam", want: params{ClientID: id, Request: []uint8{3, 1, 6, 15, 119}}},
		{name: "defaults", ipam: `{}`, want: params{ClientID: id, Request: []uint8{3, 1, 6, 15, 119}}},
		{
			name: "requested codes come first, deduplicated",
			ipam: `{"request":[{"option":"121"},{"option":"routers"},{"option":"121"}]}`,
			want: params{ClientID: id, Request: []uint8{121, 3, 1, 6, 15, 119}},
		},
		{
			name: "skipDefault anywhere drops the defaults",
			ipam: `{"request":[{"option":"subnet-mask"},{"option":"42","skipDefault":true}]}`,
			want: params{ClientID: id, Request: []uint8{1, 42}},
		},
		{
			name: "skipDefault alone keeps the library's list",
			ipam: `{"request":[{"skipDefault":true,"option":"0"}]}`,
			want: params{ClientID: id, Request: []uint8{0}},
		},
		{
			name: "provide: value, and fromArg winning over it",
			ipam: `{"provide":[{"option":"host-name","value":"fixed","fromArg":"K8S_POD_NAME"},{"option":"vendor-class-identifier","value":"v"}],"priority":7}`,
			args: "IgnoreUnknown=1;K8S_POD_NAME=web-1;junk",
			want: params{ClientID: id, Options: []option{{12, []byte("web-1")}, {60, []byte("v")}}, Request: []uint8{3, 1, 6, 15, 119}},
			prio: 7,
		},
		{
			name: "provide: a missing fromArg adds nothing",
			ipam: `{"provide":[{"option":"user-class","fromArg":"NOPE"}]}`,
			want: params{ClientID: id, Request: []uint8{3, 1, 6, 15, 119}},
		},
		{
			name: "provide: client identifier replaces the generated one",
			ipam: `{"provide":[{"option":"dhcp-client-identifier","value":"mine"}]}`,
			want: params{ClientID: []byte("mine"), Request: []uint8{3, 1, 6, 15, 119}},
		},
		{
			name: "bad option name",
			ipam: `{"request":[{"option":"gateway"}]}`,
			err:  `Can not parse option "gateway": Can not parse option: strconv.ParseUint: parsing "gateway": invalid syntax`,
		},
		{
			name: "option code out of range",
			ipam: `{"provide":[{"option":"256","value":"x"}]}`,
			err:  `Can not parse option "256": Can not parse option: strconv.ParseUint: parsing "256": value out of range`,
		},
		{
			name: "value too long",
			ipam: `{"provide":[{"option":"host-name","value":"` + strings.Repeat("x", 256) + `"}]}`,
			err:  `value too long for option "host-name": "` + strings.Repeat("x", 256) + `"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := `{"cniVersion":"1.1.0","name":"net1"`
			if tt.ipam != "" {
				conf += `,"ipam":` + tt.ipam
			}
			conf += "}"
			r, err := parseRequest(&dhcp.Args{ContainerID: "c1", IfName: "eth0", Netns: "/n", Args: tt.args, StdinData: []byte(conf)}, true)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.DUID, want.IAID = duidOf("c1"), iaidOf("eth0")
			if !reflect.DeepEqual(r.params, want) || r.shape.priority != tt.prio {
				t.Errorf("params %+v prio %d, want %+v prio %d", r.params, r.shape.priority, want, tt.prio)
			}
			if r.clientID != "c1/net1/eth0" || r.owner != (owner{"c1", "net1", "eth0", "/n"}) {
				t.Errorf("client ID %q owner %+v", r.clientID, r.owner)
			}
		})
	}
	// Release reads only the owner: a config whose options no longer
	// parse can still be deleted.
	bad := &dhcp.Args{ContainerID: "c1", IfName: "eth0", StdinData: []byte(`{"name":"net1","ipam":{"request":[{"option":"nope"}]}}`)}
	if r, err := parseRequest(bad, false); err != nil || r.clientID != "c1/net1/eth0" {
		t.Errorf("owner only: %+v %v", r, err)
	}
	if _, err := parseRequest(&dhcp.Args{StdinData: []byte("{")}, false); err == nil || !strings.HasPrefix(err.Error(), "error parsing netconf: ") {
		t.Errorf("bad JSON: %v", err)
	}
}

func TestClientIDTruncation(t *testing.T) {
	long := strings.Repeat("a", 300)
	id := clientIDOf(owner{ContainerID: long, Network: "n", IfName: "eth0"})
	if len(id) != 254 || id != long[:254] {
		t.Errorf("client ID of %d bytes: %q", len(id), id)
	}
	if id := clientIDOf(owner{ContainerID: "c", Network: "n", IfName: "eth0"}); id != "c/n/eth0" {
		t.Errorf("client ID %q", id)
	}
}

// ack builds a DHCPACK for 10.0.0.5 with the given options.
func ack(t testing.TB, opts ...dhcpv4.Option) *dhcpv4.DHCPv4 {
	t.Helper()
	mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithYourIP(net.IPv4(10, 0, 0, 5))}
	for _, o := range opts {
		mods = append(mods, dhcpv4.WithOption(o))
	}
	m, err := dhcpv4.New(mods...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBuildResult(t *testing.T) {
	mask := dhcpv4.OptSubnetMask(net.CIDRMask(24, 32))
	router := dhcpv4.OptRouter(net.IPv4(10, 0, 0, 1), net.IPv4(10, 0, 0, 2))
	classless := dhcpv4.OptClasslessStaticRoute(
		&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4(192, 168, 1, 0), Mask: net.CIDRMask(24, 32)}, Router: net.IPv4(10, 0, 0, 254)},
		&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4(10, 9, 0, 0), Mask: net.CIDRMask(16, 32)}, Router: net.IPv4zero},
	)
	static := dhcpv4.OptGeneric(dhcpv4.OptionStaticRoutingTable, []byte{
		10, 8, 0, 0, 10, 0, 0, 9, // class A
		172, 16, 0, 0, 10, 0, 0, 9, // class B
		192, 168, 7, 0, 10, 0, 0, 9, // class C
		224, 0, 0, 0, 10, 0, 0, 9, // class D: no mask, skipped
	})
	tests := []struct {
		name string
		opts []dhcpv4.Option
		prio int
		want string // JSON of the 1.1.0 result
		err  string
	}{
		{name: "no mask", opts: []dhcpv4.Option{router}, err: "DHCP option Subnet Mask not found in DHCPACK"},
		{
			name: "no router: no gateway, no routes",
			opts: []dhcpv4.Option{mask},
			want: `{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.5/24"}]}`,
		},
		{
			name: "router: default route via the first",
			opts: []dhcpv4.Option{mask, router},
			want: `{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}]}`,
		},
		{
			name: "classless routes only, on-link ones scoped",
			opts: []dhcpv4.Option{mask, router, classless, static},
			want: `{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"}],"routes":[{"dst":"192.168.1.0/24","gw":"10.0.0.254"},{"dst":"10.9.0.0/16","gw":"0.0.0.0","scope":253}]}`,
		},
		{
			name: "classful static routes then default, with priority",
			opts: []dhcpv4.Option{mask, router, static},
			prio: 9,
			want: `{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"}],"routes":[{"dst":"10.8.0.0/8","gw":"10.0.0.9","priority":9},{"dst":"172.16.0.0/16","gw":"10.0.0.9","priority":9},{"dst":"192.168.7.0/24","gw":"10.0.0.9","priority":9},{"dst":"0.0.0.0/0","gw":"10.0.0.1","priority":9}]}`,
		},
		{
			name: "dns",
			opts: []dhcpv4.Option{mask, dhcpv4.OptDNS(net.IPv4(10, 0, 0, 53)), dhcpv4.OptDomainName("example.test"), dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: []string{"a.test", "b.test"}})},
			want: `{"cniVersion":"1.1.0","dns":{"domain":"example.test","nameservers":["10.0.0.53"],"search":["a.test","b.test"]},"ips":[{"address":"10.0.0.5/24"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := buildResult(ack(t, tt.opts...), tt.prio)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			enc, err := cni.Encode(res, "1.1.0")
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := json.Compact(&out, enc); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("result\n%s\nwant\n%s", out.String(), tt.want)
			}
		})
	}
}

func TestTimers(t *testing.T) {
	at := time.Unix(1000, 0)
	tests := []struct {
		name       string
		opts       []dhcpv4.Option
		t1, t2, ex time.Duration
	}{
		{"defaults: one hour, 50 %, 85 %", nil, 30 * time.Minute, 51 * time.Minute, time.Hour},
		{"from the lease time", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(100 * time.Second)}, 50 * time.Second, 85 * time.Second, 100 * time.Second},
		{"explicit T1 and T2", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(100 * time.Second), dhcpv4.OptRenewTimeValue(10 * time.Second), dhcpv4.OptRebindingTimeValue(20 * time.Second)}, 10 * time.Second, 20 * time.Second, 100 * time.Second},
		{"odd values capped", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(100 * time.Second), dhcpv4.OptRenewTimeValue(300 * time.Second), dhcpv4.OptRebindingTimeValue(200 * time.Second)}, 100 * time.Second, 100 * time.Second, 100 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t1, t2, ex := binding4{&nclient4.Lease{ACK: ack(t, tt.opts...), CreationTime: at}}.timers()
			if t1.Sub(at) != tt.t1 || t2.Sub(at) != tt.t2 || ex.Sub(at) != tt.ex {
				t.Errorf("T1 %v T2 %v expiry %v, want %v %v %v", t1.Sub(at), t2.Sub(at), ex.Sub(at), tt.t1, tt.t2, tt.ex)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	max := 62 * time.Second
	want := []time.Duration{2, 2, 2, 2, 8, 16, 32, 64, 64, 64}
	for n, w := range want {
		for range 20 {
			d := backoff(n, max)
			if lo, hi := w*time.Second-time.Second, w*time.Second+time.Second; d < lo || d >= hi {
				t.Fatalf("backoff(%d) = %v, want %v ± 1 s", n, d, w*time.Second)
			}
		}
	}
}

func TestStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	st, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v", fi.Mode(), err)
	}
	a := ack(t, dhcpv4.OptSubnetMask(net.CIDRMask(24, 32)))
	r := &record{
		Version: recordVersion, ClientID: "c1/n/eth0", Owner: owner{"c1", "n", "eth0", "/var/run/netns/x"},
		Params: params{ClientID: []byte{0, 'c'}, Options: []option{{12, []byte("h")}}, Request: []uint8{3, 1}},
		Offer:  a.ToBytes(), ACK: a.ToBytes(), AckedAt: time.Unix(1234, 0).UTC(),
	}
	if err := st.save(r); err != nil {
		t.Fatal(err)
	}
	// A tampered record (its name does not match its client ID), junk,
	// and a leftover temporary file are not loaded.
	data, _ := os.ReadFile(st.fileName(r.key()))
	os.WriteFile(filepath.Join(dir, "other.lease"), data, 0o600)
	os.WriteFile(filepath.Join(dir, "junk.lease"), []byte("{"), 0o600)
	os.WriteFile(filepath.Join(dir, ".tmp-1"), []byte("x"), 0o600)
	var logged []string
	got := st.load(func(f string, a ...any) { logged = append(logged, f) })
	if len(got) != 1 || !reflect.DeepEqual(got[0], r) {
		t.Fatalf("loaded %+v, want %+v", got, r)
	}
	if len(logged) != 2 {
		t.Errorf("logged %v, want two skipped records", logged)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-1")); !os.IsNotExist(err) {
		t.Error("temporary file not removed")
	}
	if _, err := bindingFromRecord(got[0]); err != nil {
		t.Error(err)
	}
	if err := st.remove(r.key()); err != nil {
		t.Fatal(err)
	}
	if err := st.remove(r.key()); err != nil {
		t.Errorf("second remove: %v", err)
	}
	var none *store
	if none.save(r) != nil || none.remove(key{id: "x"}) != nil || none.load(t.Logf) != nil {
		t.Error("a nil store must do nothing")
	}
}
