package conformance

import "strings"

// Golden results, written by hand from the reference's result shapes and
// key order per version family, its conversions between families, and its
// printed output for a dual-stack host-local network.
// VERSION stands for the config's cniVersion.

// staticFull is the static IPAM config behind goldenStaticFull*: one IPv4
// and one IPv6 address with gateways (the IPv6 one written non-canonically
// to check canonical output), three routes (one with every optional field,
// scope 0 explicitly), a full dns object.
const staticFull = `{
  "type": "static",
  "ipam": {
    "type": "static",
    "addresses": [
      {"address": "10.10.0.5/24", "gateway": "10.10.0.1"},
      {"address": "fd00:10:0:0::0005/64", "gateway": "fd00:10::1"}
    ],
    "routes": [
      {"dst": "0.0.0.0/0"},
      {"dst": "::/0", "gw": "fd00:10::1"},
      {"dst": "192.168.0.0/16", "gw": "10.10.0.254", "mtu": 1400, "advmss": 1360, "priority": 10, "table": 100, "scope": 0}
    ],
    "dns": {
      "nameservers": ["10.10.0.1"],
      "domain": "example.com",
      "search": ["svc.local"],
      "options": ["ndots:2"]
    }
  }
}`

// 1.0.0/1.1.0: every object's keys byte-wise alphabetical, no per-IP
// version, dns present because not empty.
const goldenStaticFullCurrent = `{
    "cniVersion": "VERSION",
    "dns": {
        "domain": "example.com",
        "nameservers": [
            "10.10.0.1"
        ],
        "options": [
            "ndots:2"
        ],
        "search": [
            "svc.local"
        ]
    },
    "ips": [
        {
            "address": "10.10.0.5/24",
            "gateway": "10.10.0.1"
        },
        {
            "address": "fd00:10::5/64",
            "gateway": "fd00:10::1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        },
        {
            "dst": "::/0",
            "gw": "fd00:10::1"
        },
        {
            "advmss": 1360,
            "dst": "192.168.0.0/16",
            "gw": "10.10.0.254",
            "mtu": 1400,
            "priority": 10,
            "scope": 0,
            "table": 100
        }
    ]
}`

// 0.3.0/0.3.1/0.4.0: struct order cniVersion, ips, routes, dns; "version"
// first in each ip; routes verbatim in struct order dst, gw, mtu, advmss,
// priority, table, scope; dns struct order.
const goldenStaticFullMiddle = `{
    "cniVersion": "VERSION",
    "ips": [
        {
            "version": "4",
            "address": "10.10.0.5/24",
            "gateway": "10.10.0.1"
        },
        {
            "version": "6",
            "address": "fd00:10::5/64",
            "gateway": "fd00:10::1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        },
        {
            "dst": "::/0",
            "gw": "fd00:10::1"
        },
        {
            "dst": "192.168.0.0/16",
            "gw": "10.10.0.254",
            "mtu": 1400,
            "advmss": 1360,
            "priority": 10,
            "table": 100,
            "scope": 0
        }
    ],
    "dns": {
        "nameservers": [
            "10.10.0.1"
        ],
        "domain": "example.com",
        "search": [
            "svc.local"
        ],
        "options": [
            "ndots:2"
        ]
    }
}`

// 0.1.0/0.2.0: ip4/ip6 blocks, routes split by destination family, only
// dst and gw kept.
const goldenStaticFullLegacy = `{
    "cniVersion": "VERSION",
    "ip4": {
        "ip": "10.10.0.5/24",
        "gateway": "10.10.0.1",
        "routes": [
            {
                "dst": "0.0.0.0/0"
            },
            {
                "dst": "192.168.0.0/16",
                "gw": "10.10.0.254"
            }
        ]
    },
    "ip6": {
        "ip": "fd00:10::5/64",
        "gateway": "fd00:10::1",
        "routes": [
            {
                "dst": "::/0",
                "gw": "fd00:10::1"
            }
        ]
    },
    "dns": {
        "nameservers": [
            "10.10.0.1"
        ],
        "domain": "example.com",
        "search": [
            "svc.local"
        ],
        "options": [
            "ndots:2"
        ]
    }
}`

// staticMinimal: one IPv4 address with host bits, no gateway, no routes, no
// dns: 1.x omits dns, 0.x prints "dns": {}.
const staticMinimal = `{"type": "static", "ipam": {"addresses": [{"address": "192.0.2.77/28"}]}}`

const goldenStaticMinimalCurrent = `{
    "cniVersion": "VERSION",
    "ips": [
        {
            "address": "192.0.2.77/28"
        }
    ]
}`

const goldenStaticMinimalMiddle = `{
    "cniVersion": "VERSION",
    "ips": [
        {
            "version": "4",
            "address": "192.0.2.77/28"
        }
    ],
    "dns": {}
}`

const goldenStaticMinimalLegacy = `{
    "cniVersion": "VERSION",
    "ip4": {
        "ip": "192.0.2.77/28"
    },
    "dns": {}
}`

// staticEmpty has no address at all: allowed from 0.3.0 on, a conversion
// error below.
const staticEmpty = `{"type": "static", "ipam": {"addresses": []}}`

const goldenStaticEmptyCurrent = `{
    "cniVersion": "VERSION"
}`

const goldenStaticEmptyMiddle = `{
    "cniVersion": "VERSION",
    "dns": {}
}`

// goldenFor picks the golden of v's family and fills in the version.
func goldenFor(v, current, middle, legacy string) string {
	g := current
	switch family(v) {
	case "middle":
		g = middle
	case "legacy":
		g = legacy
	}
	return strings.ReplaceAll(g, "VERSION", v)
}

// host-local goldens: host-local's own stdout at 1.1.0 and 0.2.0, for the first
// allocation of a fresh pool (.2 instead of .7).
const goldenHostLocalCurrent = `{
    "cniVersion": "VERSION",
    "dns": {
        "nameservers": [
            "10.22.0.1"
        ],
        "search": [
            "svc.local"
        ]
    },
    "ips": [
        {
            "address": "10.22.0.2/16",
            "gateway": "10.22.0.1"
        },
        {
            "address": "fd00:22::2/64",
            "gateway": "fd00:22::1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        },
        {
            "dst": "::/0"
        }
    ]
}`

const goldenHostLocalMiddle = `{
    "cniVersion": "VERSION",
    "ips": [
        {
            "version": "4",
            "address": "10.22.0.2/16",
            "gateway": "10.22.0.1"
        },
        {
            "version": "6",
            "address": "fd00:22::2/64",
            "gateway": "fd00:22::1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        },
        {
            "dst": "::/0"
        }
    ],
    "dns": {
        "nameservers": [
            "10.22.0.1"
        ],
        "search": [
            "svc.local"
        ]
    }
}`

const goldenHostLocalLegacy = `{
    "cniVersion": "VERSION",
    "ip4": {
        "ip": "10.22.0.2/16",
        "gateway": "10.22.0.1",
        "routes": [
            {
                "dst": "0.0.0.0/0"
            }
        ]
    },
    "ip6": {
        "ip": "fd00:22::2/64",
        "gateway": "fd00:22::1",
        "routes": [
            {
                "dst": "::/0"
            }
        ]
    },
    "dns": {
        "nameservers": [
            "10.22.0.1"
        ],
        "search": [
            "svc.local"
        ]
    }
}`
