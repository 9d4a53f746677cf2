package hostlocal

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/matryer/is"
	"github.com/nftcni/nftcni/cni"
)

func TestLoadConfigErrors(t *testing.T) {
	r := func(ranges ...string) string { return `"ranges":[` + strings.Join(ranges, ",") + `]` }
	tests := []struct {
		name    string
		conf    string // whole config; "{ipam}" is replaced by an ipam object
		ipam    string
		version string
		args    string
		want    string
	}{
		// keys and JSON decoding
		{name: "no ipam", conf: `{"cniVersion":"1.1.0","name":"net"}`, want: "IPAM config missing 'ipam' key"},
		{name: "null ipam", conf: `{"cniVersion":"1.1.0","name":"net","ipam":null}`, want: "IPAM config missing 'ipam' key"},
		{name: "decode errors come first", conf: `{"name":"net","runtimeConfig":{"ips":["x"]}}`, want: "invalid IP address x"},
		{name: "bad subnet", ipam: `"subnet":"junk"`, want: "invalid CIDR address: junk"},
		{name: "empty subnet", ipam: `"subnet":""`, want: "invalid CIDR address: "},
		{name: "null subnet", ipam: r(`[{"subnet":null}]`), want: "invalid CIDR address: "},
		{name: "subnet with zone", ipam: `"subnet":"fe80::%eth0/64"`, want: "invalid CIDR address: fe80::%eth0/64"},
		{name: "bad gateway", ipam: `"subnet":"10.0.0.0/24","gateway":"x"`, want: "invalid IP address: x"},
		{name: "bad rangeStart", ipam: r(`[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.300"}]`), want: "invalid IP address: 10.0.0.300"},
		{name: "bad rangeEnd", ipam: r(`[{"subnet":"10.0.0.0/24","rangeEnd":"y"}]`), want: "invalid IP address: y"},
		{name: "bad route dst", ipam: `"subnet":"10.0.0.0/24","routes":[{"dst":"z"}]`, want: "invalid CIDR address: z"},
		{name: "empty route dst", ipam: `"subnet":"10.0.0.0/24","routes":[{"dst":""}]`, want: "invalid CIDR address: "},
		{name: "bad route gw", ipam: `"subnet":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"g"}]`, want: "invalid IP address: g"},
		// Type mismatches fail with encoding/json's message, which names our
		// wire types (the reference's name its own).
		{name: "route type error", ipam: `"subnet":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","mtu":"x"}]`,
			want: "json: cannot unmarshal string into Go struct field wireIPAM.ipam.routes.mtu of type int"},
		{name: "bad args.cni.ips", ipam: `"subnet":"10.0.0.0/24"`, conf: `{"name":"net","ipam":{ipam},"args":{"cni":{"ips":["junk"]}}}`,
			want: "invalid IP address junk"},
		{name: "bad runtimeConfig.ips", ipam: `"subnet":"10.0.0.0/24"`, conf: `{"name":"net","ipam":{ipam},"runtimeConfig":{"ips":["10.0.0.1/33"]}}`,
			want: "invalid IP address 10.0.0.1/33"},
		{name: "empty runtimeConfig.ips entry", ipam: `"subnet":"10.0.0.0/24"`, conf: `{"name":"net","ipam":{ipam},"runtimeConfig":{"ips":[""]}}`,
			want: "invalid IP address "},
		{name: "null runtimeConfig.ips entry", ipam: `"subnet":"10.0.0.0/24"`, conf: `{"name":"net","ipam":{ipam},"runtimeConfig":{"ips":[null]}}`,
			want: "invalid IP address null"},
		{name: "CNI_ARGS bad IP", ipam: `"subnet":"10.0.0.0/24"`, args: "IP=junk",
			want: `ARGS: error parsing value of pair "IP=junk": invalid IP address junk`},
		{name: "CNI_ARGS unknown key", ipam: `"subnet":"10.0.0.0/24"`, args: "FOO=1", want: `ARGS: unknown args ["FOO=1"]`},
		{name: "CNI_ARGS bad pair", ipam: `"subnet":"10.0.0.0/24"`, args: "IP=10.0.0.5;", want: `ARGS: invalid pair ""`},

		// assembly of ranges from subnet/ranges and runtime ipRanges
		{name: "no ranges", ipam: ``, want: "no IP ranges specified"},
		{name: "rangeStart without subnet", ipam: `"rangeStart":"10.0.0.5","gateway":"10.0.0.1"`, want: "no IP ranges specified"},
		{name: "empty ranges list", ipam: `"ranges":[]`, want: "no IP ranges specified"},

		// validation per range
		{name: "missing subnet", ipam: r(`[{"rangeStart":"10.0.0.5"}]`), want: "invalid range set 0: IP <nil> not v4 nor v6"},
		{name: "null range", ipam: r(`[null]`), want: "invalid range set 0: IP <nil> not v4 nor v6"},
		{name: "v4 /31", ipam: `"subnet":"10.0.0.0/31"`, want: "invalid range set 0: Network 10.0.0.0/31 too small to allocate from"},
		{name: "v4 /32 host bits", ipam: `"subnet":"10.0.0.7/32"`, want: "invalid range set 0: Network 10.0.0.7/32 too small to allocate from"},
		{name: "v6 /127", ipam: `"subnet":"2001:db8::/127"`, want: "invalid range set 0: Network 2001:db8::/127 too small to allocate from"},
		{name: "4in6 /120", ipam: `"subnet":"::ffff:10.0.0.0/120"`, want: "invalid range set 0: IPNet IP and Mask version mismatch"},
		{name: "4in6 /127", ipam: `"subnet":"::ffff:10.0.0.0/127"`, want: "invalid range set 0: Network 10.0.0.0/31 too small to allocate from"},
		{name: "host bits", ipam: `"subnet":"10.0.0.1/24"`,
			want: "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 10.0.0.0"},
		{name: "v6 host bits", ipam: `"subnet":"2001:db8::5/64"`,
			want: "invalid range set 0: Network has host bits set. For a subnet mask of length 64 the network address is 2001:db8::"},
		{name: "rangeStart outside", ipam: `"subnet":"10.0.0.0/24","rangeStart":"10.0.1.5"`,
			want: "invalid range set 0: RangeStart 10.0.1.5 not in network 10.0.0.0/24"},
		{name: "rangeStart other family", ipam: `"subnet":"10.0.0.0/24","rangeStart":"2001:db8::1"`,
			want: "invalid range set 0: RangeStart 2001:db8::1 not in network 10.0.0.0/24"},
		{name: "rangeStart after rangeEnd", ipam: `"subnet":"10.0.0.0/24","rangeStart":"10.0.0.100","rangeEnd":"10.0.0.50"`,
			want: "invalid range set 0: RangeStart 10.0.0.100 not in network 10.0.0.0/24"},
		// Refused since the reference's v1.10.0.
		{name: "rangeStart after the defaulted rangeEnd", ipam: `"subnet":"10.0.0.0/24","rangeStart":"10.0.0.255"`,
			want: "invalid range set 0: RangeStart 10.0.0.255 is after RangeEnd 10.0.0.254 in network 10.0.0.0/24"},
		{name: "gateway outside subnet", ipam: `"subnet":"10.0.0.0/24","gateway":"192.168.1.1"`,
			want: "invalid range set 0: gateway 192.168.1.1 not in network 10.0.0.0/24"},
		{name: "gateway other family", ipam: r(`[{"subnet":"10.0.0.0/24"}]`, `[{"subnet":"2001:db8::/64","gateway":"10.0.0.1"}]`),
			want: "invalid range set 1: gateway 10.0.0.1 not in network 2001:db8::/64"},
		{name: "gateway before rangeStart's check", ipam: `"subnet":"10.0.0.0/24","gateway":"10.0.1.1","rangeStart":"10.0.1.5"`,
			want: "invalid range set 0: gateway 10.0.1.1 not in network 10.0.0.0/24"},
		{name: "rangeEnd outside", ipam: `"subnet":"10.0.0.0/24","rangeEnd":"10.0.1.5"`,
			want: "invalid range set 0: RangeEnd 10.0.1.5 not in network 10.0.0.0/24"},
		{name: "rangeEnd before default start", ipam: `"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.0"`,
			want: "invalid range set 0: RangeEnd 10.0.0.0 not in network 10.0.0.0/24"},
		{name: "rangeEnd other family", ipam: `"subnet":"10.0.0.0/24","rangeStart":"10.0.0.5","rangeEnd":"2001:db8::1"`,
			want: "invalid range set 0: RangeEnd 2001:db8::1 not in network 10.0.0.0/24"},

		// validation per range set
		{name: "empty set", ipam: r(`[]`), want: "invalid range set 0: empty range set"},
		{name: "null set", ipam: r(`null`), want: "invalid range set 0: empty range set"},
		{name: "mixed families", ipam: r(`[{"subnet":"10.0.0.0/24"},{"subnet":"2001:db8::/64"}]`), want: "invalid range set 0: mixed address families"},
		{name: "bad range before family check", ipam: r(`[{"subnet":"10.0.0.0/24"},{"subnet":"2001:db8::/127"}]`),
			want: "invalid range set 0: Network 2001:db8::/127 too small to allocate from"},
		{name: "overlap in set", ipam: r(`[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.20"}]`),
			want: "invalid range set 0: subnets 10.0.0.1-10.0.0.254 and 10.0.0.10-10.0.0.20 overlap"},
		{name: "set index counts legacy", ipam: `"subnet":"10.0.0.0/24",` + r(`[{"subnet":"10.1.0.0/16","rangeEnd":"10.2.0.0"}]`),
			want: "invalid range set 1: RangeEnd 10.2.0.0 not in network 10.1.0.0/16"},
		{name: "bad CIDR is a decode error", ipam: `"subnet":"10.0.0.0/33"`,
			conf: `{"name":"net","ipam":{ipam},"runtimeConfig":{"ipRanges":[[{"subnet":"10.9.0.0/24"}]]}}`,
			want: "invalid CIDR address: 10.0.0.0/33"},
		{name: "runtime ipRanges first", ipam: `"subnet":"10.0.0.0/31"`,
			conf: `{"name":"net","ipam":{ipam},"runtimeConfig":{"ipRanges":[[{"subnet":"10.9.0.0/24"}]]}}`,
			want: "invalid range set 1: Network 10.0.0.0/31 too small to allocate from"},

		// validation across range sets
		{name: "two v4 sets below 0.3.0", version: "0.2.0", ipam: r(`[{"subnet":"10.0.0.0/24"}]`, `[{"subnet":"10.1.0.0/24"}]`),
			want: "CNI version 0.2.0 does not support more than 1 address per family"},
		{name: "two v6 sets, empty version", version: "-", ipam: r(`[{"subnet":"2001:db8::/64"}]`, `[{"subnet":"2001:db9::/64"}]`),
			want: "CNI version  does not support more than 1 address per family"},
		{name: "family limit before overlap", version: "0.1.0", ipam: r(`[{"subnet":"10.0.0.0/24"}]`, `[{"subnet":"10.0.0.0/24"}]`),
			want: "CNI version 0.1.0 does not support more than 1 address per family"},
		{name: "sets overlap", ipam: r(`[{"subnet":"10.0.0.0/24"}]`, `[{"subnet":"10.0.0.0/16","rangeStart":"10.0.0.200","rangeEnd":"10.0.1.10"}]`),
			want: "range set 0 overlaps with 1"},
		{name: "absolute overlap index", ipam: r(`[{"subnet":"10.0.0.0/24"}]`, `[{"subnet":"10.1.0.0/24"}]`, `[{"subnet":"10.1.0.0/16"}]`),
			want: "range set 1 overlaps with 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var data []byte
			ver := tc.version
			if ver == "-" {
				ver = ""
			} else if ver == "" {
				ver = "1.1.0"
			}
			if tc.conf != "" {
				data = []byte(strings.Replace(tc.conf, "{ipam}", "{"+tc.ipam+"}", 1))
			} else {
				ipam := tc.ipam
				if ipam != "" {
					ipam = "," + ipam
				}
				data = []byte(`{"cniVersion":"` + ver + `","name":"net","ipam":{"type":"host-local"` + ipam + `}}`)
			}
			_, err := loadConf(data, tc.args)
			if got := errText(err); got != tc.want {
				t.Errorf("config %s\n got: %q\nwant: %q", data, got, tc.want)
			}
		})
	}
}

func TestLoadConfigValid(t *testing.T) {
	tests := []struct {
		name string
		conf string
		args string
		sets string // RangeSet strings joined by " | "
		gws  string
	}{
		{name: "v4 defaults", conf: `"subnet":"10.0.0.0/24"`, sets: "10.0.0.1-10.0.0.254", gws: "10.0.0.1"},
		{name: "v6 defaults include the all-ones address", conf: `"subnet":"2001:db8::/64"`,
			sets: "2001:db8::1-2001:db8::ffff:ffff:ffff:ffff", gws: "2001:db8::1"},
		{name: "case-insensitive keys", conf: `"SUBNET":"10.0.0.0/30","GateWay":"10.0.0.2"`, sets: "10.0.0.1-10.0.0.2", gws: "10.0.0.2"},
		{name: "last duplicate wins", conf: `"subnet":"10.0.0.0/24","subnet":"10.5.0.0/30"`, sets: "10.5.0.1-10.5.0.2", gws: "10.5.0.1"},
		{name: "gateway outside the range, inside the subnet", conf: `"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","gateway":"10.0.0.255"`,
			sets: "10.0.0.10-10.0.0.254", gws: "10.0.0.255"},
		{name: "IPv6 rangeStart at the last address", conf: `"subnet":"fd00::/120","rangeStart":"fd00::ff"`, sets: "fd00::ff-fd00::ff", gws: "fd00::1"},
		{name: "explicit network and broadcast", conf: `"subnet":"10.5.0.0/24","rangeStart":"10.5.0.0","rangeEnd":"10.5.0.255"`,
			sets: "10.5.0.0-10.5.0.255", gws: "10.5.0.1"},
		{name: "empty strings mean default", conf: `"subnet":"10.0.0.0/24","gateway":"","rangeStart":null`, sets: "10.0.0.1-10.0.0.254", gws: "10.0.0.1"},
		{name: "4in6 bounds are canonicalised", conf: `"subnet":"10.0.0.0/24","rangeStart":"::ffff:10.0.0.10","gateway":"::ffff:10.0.0.9"`,
			sets: "10.0.0.10-10.0.0.254", gws: "10.0.0.9"},
		{name: "split /24 in one set", conf: `"ranges":[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.100"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.101"}]]`,
			sets: "10.0.0.1-10.0.0.100,10.0.0.101-10.0.0.254", gws: "10.0.0.1,10.0.0.1"},
		{name: "split /24 in two sets", conf: `"ranges":[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.100"}],[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.101"}]]`,
			sets: "10.0.0.1-10.0.0.100 | 10.0.0.101-10.0.0.254", gws: "10.0.0.1 | 10.0.0.1"},
		{name: "order: runtime, legacy, ranges",
			conf: `"subnet":"10.2.0.0/24","ranges":[[{"subnet":"2001:db8::/120"}]]},"runtimeConfig":{"ipRanges":[[{"subnet":"10.1.0.0/30"}]]`,
			sets: "10.1.0.1-10.1.0.2 | 10.2.0.1-10.2.0.254 | 2001:db8::1-2001:db8::ff", gws: "10.1.0.1 | 10.2.0.1 | 2001:db8::1"},
		{name: "v4 plus v6 below 0.3.0 is fine", conf: `"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"2001:db8::/64"}]]`,
			sets: "10.0.0.1-10.0.0.254 | 2001:db8::1-2001:db8::ffff:ffff:ffff:ffff", gws: "10.0.0.1 | 2001:db8::1"},
		{name: "IgnoreUnknown", conf: `"subnet":"10.0.0.0/24"`, args: "IgnoreUnknown=1;K8S_POD_NAME=x", sets: "10.0.0.1-10.0.0.254", gws: "10.0.0.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			ver := "1.1.0"
			if strings.Contains(tc.name, "0.3.0") {
				ver = "0.2.0"
			}
			data := []byte(`{"cniVersion":"` + ver + `","name":"net","ipam":{"type":"host-local",` + tc.conf + `}}`)
			c, err := loadConf(data, tc.args)
			is.NoErr(err)
			var sets, gws []string
			for _, s := range c.Ranges {
				sets = append(sets, s.String())
				var g []string
				for _, r := range s {
					g = append(g, r.Gateway.String())
				}
				gws = append(gws, strings.Join(g, ","))
			}
			is.Equal(strings.Join(sets, " | "), tc.sets)
			is.Equal(strings.Join(gws, " | "), tc.gws)
		})
	}
}

func TestLoadConfigRequested(t *testing.T) {
	is := is.New(t)
	data := []byte(`{"cniVersion":"1.1.0","name":"net",
		"ipam":{"subnet":"10.0.0.0/24","DataDir":"/x","resolvConf":"/r"},
		"args":{"cni":{"ips":["10.0.0.5","::ffff:10.0.0.6","10.0.0.6/8"],"other":1},"foo":"bar"},
		"runtimeConfig":{"ips":["2001:db8:1:0::0100/64","10.0.0.5"]}}`)
	c, err := loadConf(data, "IP=10.0.0.7/24")
	is.NoErr(err)
	var got []string
	for _, a := range c.Requested {
		got = append(got, a.String())
	}
	is.Equal(strings.Join(got, " "), "10.0.0.7 10.0.0.5 10.0.0.6 2001:db8:1::100")
	is.Equal(c.DataDir, "/x")
	is.Equal(c.ResolvConf, "/r")
	is.Equal(c.Name, "net")
}

func TestLoadConfigRoutes(t *testing.T) {
	is := is.New(t)
	data := []byte(`{"cniVersion":"1.1.0","name":"net","ipam":{"subnet":"10.0.0.0/24","routes":[
		{"dst":"0.0.0.0/0"},
		{"dst":"10.9.0.1/16","gw":"::ffff:10.0.0.254","mtu":1400,"advmss":1360,"priority":5,"table":0,"scope":253},
		{"dst":"3ffe:ffff:0:01ff::1/64"},
		{"dst":"::ffff:10.0.0.0/120"},
		{"gw":"10.0.0.1"},
		null]}}`)
	c, err := loadConf(data, "")
	is.NoErr(err)
	is.Equal(len(c.Routes), 5)
	res := &cni.Result{CNIVersion: "1.1.0", IPs: []*cni.IPConfig{{Address: netip.MustParsePrefix("10.0.0.2/24")}}, Routes: c.Routes}
	out, err := cni.Encode(res, "1.1.0")
	is.NoErr(err)
	want := `{
    "cniVersion": "1.1.0",
    "ips": [
        {
            "address": "10.0.0.2/24"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        },
        {
            "advmss": 1360,
            "dst": "10.9.0.1/16",
            "gw": "10.0.0.254",
            "mtu": 1400,
            "priority": 5,
            "scope": 253,
            "table": 0
        },
        {
            "dst": "3ffe:ffff:0:1ff::1/64"
        },
        {
            "dst": "10.0.0.0/24"
        },
        {
            "dst": "\u003cnil\u003e",
            "gw": "10.0.0.1"
        }
    ]
}`
	is.Equal(string(out), want)
}
