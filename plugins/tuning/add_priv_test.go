package tuning

import (
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// allFields asks for every sysctl of testSysctls (in the key spellings the
// reference accepts) and every link attribute.
const allFields = `,"sysctl":{"net.core.somaxconn":"1234","net.ipv4.conf.IFNAME.arp_filter":"1",` +
	`"net/ipv4/conf/IFNAME/arp_ignore":"2","net.ipv4.ping_group_range":"0\t100"},` +
	`"mac":"02:AB:CD:EF:00:01","mtu":1400,"promisc":true,"allmulti":true,"txQLen":42`

// TestAdd: ADD writes every sysctl and link attribute in the container, and
// records the link's previous values in the backup file.
func TestAdd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.state()
	e.th.OK(e.call("ADD", "c1", e.conf("1.0.0", allFields)))

	want := state{
		Sysctls: map[string]string{
			"net/core/somaxconn":            "1234",
			"net/ipv4/conf/eth0/arp_filter": "1",
			"net/ipv4/conf/eth0/arp_ignore": "2",
			"net/ipv4/ping_group_range":     "0\t100",
		},
		MAC: "02:ab:cd:ef:00:01", MTU: 1400, Promisc: true, Allmulti: true, TxQLen: 42,
	}
	if got := e.state(); got.String() != want.String() {
		t.Errorf("after ADD\n%s\nwant\n%s", got, want)
	}
	wantBackup := "{\n \"mac\": \"" + origMAC + "\",\n \"promisc\": false,\n \"mtu\": 1500,\n \"allmulti\": false,\n \"txQLen\": 1000,\n \"network\": \"testnet\"\n}"
	if got := e.backup("c1"); got != wantBackup {
		t.Errorf("backup\n%s\nwant\n%s", got, wantBackup)
	}
	if before.MTU != 1500 || before.TxQLen != 1000 || before.Promisc || before.Allmulti {
		t.Fatalf("unexpected initial link state %s", before)
	}
}

// TestAddSysctlsOnly: without link attributes nothing is backed up and the
// link is not touched.
func TestAddSysctlsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.state()
	e.th.OK(e.call("ADD", "c1", e.conf("1.0.0", `,"sysctl":{"net.core.somaxconn":"1234"}`)))
	after := e.state()
	if after.Sysctls["net/core/somaxconn"] != "1234" || after.link().String() != before.link().String() {
		t.Errorf("after ADD %s\nbefore %s", after, before)
	}
	if b := e.backups(); len(b) != 0 {
		t.Errorf("backups %v", b)
	}
}

// TestResult: ADD prints the prevResult in the config's version, with the
// container interface's mac replaced by the configured string as given
// (not normalised). Interfaces of other names keep theirs.
func TestResult(t *testing.T) {
	t.Parallel()
	th := newEnv(t).th
	for _, tt := range []struct {
		version, fields, want string
	}{
		{"1.1.0", `,"mac":"02:AB:CD:EF:00:01"`, `{
    "cniVersion": "1.1.0",
    "dns": {
        "nameservers": [
            "10.1.0.1"
        ]
    },
    "interfaces": [
        {
            "mac": "02:00:00:00:00:bb",
            "name": "peer0"
        },
        {
            "mac": "02:AB:CD:EF:00:01",
            "name": "eth0",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "address": "10.1.0.5/24",
            "gateway": "10.1.0.1",
            "interface": 1
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ]
}`},
		{"1.0.0", `,"mtu":1400`, `{
    "cniVersion": "1.0.0",
    "dns": {
        "nameservers": [
            "10.1.0.1"
        ]
    },
    "interfaces": [
        {
            "mac": "02:00:00:00:00:bb",
            "name": "peer0"
        },
        {
            "mac": "02:00:00:00:00:aa",
            "name": "eth0",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "address": "10.1.0.5/24",
            "gateway": "10.1.0.1",
            "interface": 1
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ]
}`},
		{"0.4.0", `,"mac":"02:ab:cd:ef:00:02"`, `{
    "cniVersion": "0.4.0",
    "interfaces": [
        {
            "name": "peer0",
            "mac": "02:00:00:00:00:bb"
        },
        {
            "name": "eth0",
            "mac": "02:ab:cd:ef:00:02",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "version": "4",
            "interface": 1,
            "address": "10.1.0.5/24",
            "gateway": "10.1.0.1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ],
    "dns": {
        "nameservers": [
            "10.1.0.1"
        ]
    }
}`},
		{"0.3.1", `,"mac":"02-AB-CD-EF-00-03"`, `{
    "cniVersion": "0.3.1",
    "interfaces": [
        {
            "name": "peer0",
            "mac": "02:00:00:00:00:bb"
        },
        {
            "name": "eth0",
            "mac": "02-AB-CD-EF-00-03",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "version": "4",
            "interface": 1,
            "address": "10.1.0.5/24",
            "gateway": "10.1.0.1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ],
    "dns": {
        "nameservers": [
            "10.1.0.1"
        ]
    }
}`},
		{"0.2.0", `,"mac":"02:ab:cd:ef:00:04"`, `{
    "cniVersion": "0.2.0",
    "ip4": {
        "ip": "10.1.0.5/24",
        "gateway": "10.1.0.1"
    },
    "dns": {
        "nameservers": [
            "10.1.0.1"
        ]
    }
}`},
	} {
		t.Run(tt.version, func(t *testing.T) {
			ctr, hc := plugintest.NewCtr(t)
			e := setupEnv(t, th, ctr, hc)
			out := e.th.OK(e.call("ADD", "c1", e.conf(tt.version, tt.fields)))
			if want := strings.Replace(tt.want, "SANDBOX", e.ctr.Path(), 1); out != want {
				t.Errorf("result\n%s\nwant\n%s", out, want)
			}
		})
	}
}
