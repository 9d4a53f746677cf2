package hostlocal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

func TestResolvConf(t *testing.T) {
	tests := []struct {
		name, content string
		want          cni.DNS
		err           string
	}{
		{name: "empty", content: ""},
		{name: "all keywords",
			content: joinLines("# comment", "; comment", "   ", "nameserver 10.0.0.1 10.0.0.2", "nameserver\t2001:db8::53",
				"domain a.example", "domain b.example", "search s1 s2", "search s3", "options ndots:5 rotate", "sortlist 10.0.0.0",
				"nameserver", "  nameserver 10.0.0.3  "),
			want: cni.DNS{Nameservers: []string{"10.0.0.1", "2001:db8::53", "10.0.0.3"}, Domain: "b.example",
				Search: []string{"s1", "s2", "s3"}, Options: []string{"ndots:5", "rotate"}}},
		{name: "keywords are case-sensitive", content: "Nameserver 10.0.0.1\n"},
		{name: "no final newline", content: "nameserver 10.0.0.9", want: cni.DNS{Nameservers: []string{"10.0.0.9"}}},
		{name: "64 KiB line", content: "nameserver 10.0.0.1\n# " + strings.Repeat("x", 64<<10) + "\n", err: "bufio.Scanner: token too long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			p := filepath.Join(t.TempDir(), "resolv.conf")
			writeFile(t, p, tc.content, 0o644)
			got, err := parseResolvConf(p)
			is.Equal(errText(err), tc.err)
			is.Equal(got, tc.want)
		})
	}
	is := is.New(t)
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := parseResolvConf(missing)
	is.Equal(errText(err), "open "+missing+": no such file or directory")
}

// TestResolvConfReadBeforeAllocation: an unreadable resolvConf fails ADD
// before anything is reserved.
func TestResolvConfReadBeforeAllocation(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	_, err := doAdd(netconf(t, dir, "", `"subnet":"10.1.2.0/24","resolvConf":`+quote(missing)), "c1")
	is.Equal(errText(err), "open "+missing+": no such file or directory")
	_, err = os.Stat(netDir(dir)) // the store was not even opened
	is.True(os.IsNotExist(err))
}

// TestPrinted runs ADD through the dispatcher and checks the bytes printed
// for a current and a legacy config version.
func TestPrinted(t *testing.T) {
	dir := t.TempDir()
	rc := filepath.Join(dir, "resolv.conf")
	writeFile(t, rc, "nameserver 10.0.0.53\n", 0o644)
	ranges := `"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"2001:db8::/64"}]],"routes":[{"dst":"0.0.0.0/0"}],"resolvConf":` + quote(rc)
	tests := []struct {
		version, want string
	}{
		{"1.1.0", `{
    "cniVersion": "1.1.0",
    "dns": {
        "nameservers": [
            "10.0.0.53"
        ]
    },
    "ips": [
        {
            "address": "10.1.2.2/24",
            "gateway": "10.1.2.1"
        },
        {
            "address": "2001:db8::2/64",
            "gateway": "2001:db8::1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ]
}`},
		{"0.2.0", `{
    "cniVersion": "0.2.0",
    "ip4": {
        "ip": "10.1.2.3/24",
        "gateway": "10.1.2.1",
        "routes": [
            {
                "dst": "0.0.0.0/0"
            }
        ]
    },
    "ip6": {
        "ip": "2001:db8::3/64",
        "gateway": "2001:db8::1"
    },
    "dns": {
        "nameservers": [
            "10.0.0.53"
        ]
    }
}`},
	}
	for i, tc := range tests {
		t.Run(tc.version, func(t *testing.T) {
			is := is.New(t)
			out := plugintest.MustSucceed(t, Plugin, plugintest.Call{
				Command: "ADD", ContainerID: "c" + string(rune('1'+i)), IfName: "eth0", Netns: "/x",
				Stdin: string(netconf(t, dir, tc.version, ranges)),
			})
			is.Equal(out, tc.want)
		})
	}
}

func TestPrintedErrors(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := string(netconf(t, dir, "1.0.0", `"subnet":"10.1.0.0/30"`))
	plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "ADD", ContainerID: "c1", IfName: "eth0", Netns: "/x", Stdin: stdin})
	e := plugintest.MustFail(t, Plugin, plugintest.Call{Command: "ADD", ContainerID: "c2", IfName: "eth0", Netns: "/x", Stdin: stdin})
	is.Equal(e, cni.Error{Code: 999, Msg: "failed to allocate for range 0: no IP addresses available in range set: 10.1.0.1-10.1.0.2"})
	e = plugintest.MustFail(t, Plugin, plugintest.Call{Command: "CHECK", ContainerID: "c2", IfName: "eth0", Netns: "/x", Stdin: stdin})
	is.Equal(e, cni.Error{Code: 999, Msg: "host-local: Failed to find address added by container c2"})
	plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "CHECK", ContainerID: "c1", IfName: "eth0", Netns: "/x", Stdin: stdin})
	e = plugintest.MustFail(t, Plugin, plugintest.Call{Command: "DEL", ContainerID: "c1", IfName: "eth0", Args: "IP=junk", Stdin: stdin})
	is.Equal(e, cni.Error{Code: 999, Msg: `ARGS: error parsing value of pair "IP=junk": invalid IP address junk`})
	plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "DEL", ContainerID: "c1", IfName: "eth0", Stdin: stdin})
	plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "DEL", ContainerID: "c1", IfName: "eth0", Stdin: stdin})
}
