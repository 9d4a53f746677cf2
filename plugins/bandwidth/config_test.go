package bandwidth

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/netlinkx/qdisc"
)

// No privileges needed: unit conversions, names and config decoding.

// modernTick is what every current kernel's /proc/net/psched gives.
const modernTick = 15.625

// TestTBFFor pins the conversions bit for bit, including two worked examples
// computed with the reference's formula and the out-of-range cases, where we
// saturate and the reference (on amd64) wraps around.
func TestTBFFor(t *testing.T) {
	for _, tt := range []struct {
		name               string
		rateBits, burstBt  uint64
		want               qdisc.TBF
		refLimit, refBuffr uint32 // the reference's, where they differ
	}{
		{"worked example 1", 2048, 1600, qdisc.TBF{Rate: 256, Limit: 206, Buffer: 12207031}, 0, 0},
		{"worked example 2", 1000000, 80000, qdisc.TBF{Rate: 125000, Limit: 13125, Buffer: 1250000}, 0, 0},
		// Bits that do not make a whole byte are dropped.
		{"truncated bytes", 1000007, 80007, qdisc.TBF{Rate: 125000, Limit: 13125, Buffer: 1250000}, 0, 0},
		// 8 Mbit/s, 64 KiB: what the traffic test measures.
		{"8 Mbit/s", 8000000, 524288, qdisc.TBF{Rate: 1000000, Limit: 25000 + 65536, Buffer: 1024000}, 0, 0},
		// rate/40 truncated: 1000 B/s → 25 B of latency allowance.
		{"small rate", 8000, 8000, qdisc.TBF{Rate: 1000, Limit: 1025, Buffer: 15625000}, 0, 0},
		// 40 Gbit/s needs the 64-bit rate attribute.
		{"64-bit rate", 40000000000, 8000000, qdisc.TBF{Rate: 5000000000, Limit: 125000000 + 1000000, Buffer: 3125}, 0, 0},
		// Kubernetes' burst of 2^32-1 bits at 1 Mbit/s: 4294967288 µs
		// fit, the ticks do not.
		{"k8s burst", 1000000, math.MaxUint32, qdisc.TBF{Rate: 125000, Limit: 3125 + 536870911, Buffer: math.MaxUint32}, 0, 2684354435},
		// Even the microseconds overflow.
		{"µs overflow", 8, 8 * 1000000000, qdisc.TBF{Rate: 1, Limit: 1000000000, Buffer: math.MaxUint32}, 0, 245207040},
		// The limit saturates; the reference's wraps.
		{"limit overflow", math.MaxUint64, 8 * 4000000000, qdisc.TBF{Rate: math.MaxUint64 / 8, Limit: math.MaxUint32, Buffer: 0}, 3141006544, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tbfFor(tt.rateBits, tt.burstBt, modernTick); got != tt.want {
				t.Errorf("tbfFor(%d, %d) = %+v, want %+v", tt.rateBits, tt.burstBt, got, tt.want)
			}
			ref := tt.want
			if tt.refLimit != 0 {
				ref.Limit = tt.refLimit
			}
			if tt.refBuffr != 0 {
				ref.Buffer = tt.refBuffr
			}
			if got := referenceTBF(tt.rateBits, tt.burstBt, modernTick); got != ref {
				t.Errorf("referenceTBF(%d, %d) = %+v, want %+v", tt.rateBits, tt.burstBt, got, ref)
			}
		})
	}
}

// nativeU32 is Go's own uint32(float64) on the machine running the test.
//
//go:noinline
func nativeU32(f float64) uint32 { return uint32(f) }

// TestReferenceTBFIsAMD64: on amd64, referenceTBF equals the reference's
// arithmetic written out with Go's native conversions, over random
// limits (most of them overflowing somewhere), and tbfFor equals it
// wherever nothing overflows.
func TestReferenceTBFIsAMD64(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the reference's overflow behaviour is amd64's")
	}
	reference := func(rateBits, burstBits uint64) qdisc.TBF {
		r, b := rateBits/8, burstBits/8
		lat := float64(timeUnitsPerSec) * (latencyMillis / 1000.0)
		us := nativeU32(float64(uint32(b)) * float64(timeUnitsPerSec) / float64(r))
		return qdisc.TBF{
			Rate:   r,
			Limit:  nativeU32(float64(r)*lat/float64(timeUnitsPerSec)) + uint32(b),
			Buffer: nativeU32(float64(us) * modernTick),
		}
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	same := 0
	for range 100000 {
		rate := 8 + rnd.Uint64N(1<<uint(3+rnd.IntN(60)))
		burst := 8 + rnd.Uint64N(8*(math.MaxUint32-1)-8)
		want := reference(rate, burst)
		if got := referenceTBF(rate, burst, modernTick); got != want {
			t.Fatalf("referenceTBF(%d, %d) = %+v, want %+v", rate, burst, got, want)
		}
		if got := tbfFor(rate, burst, modernTick); got == want {
			same++
		} else if got.Buffer != math.MaxUint32 && got.Limit != math.MaxUint32 {
			t.Fatalf("tbfFor(%d, %d) = %+v differs from the reference's %+v without saturating", rate, burst, got, want)
		}
	}
	t.Logf("%d of 100000 random limits fit without overflow", same)
}

func TestParsePsched(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want float64
		err  string
	}{
		{"000003e8 00000040 000f4240 3b9aca00\n", 15.625, ""},
		// Legacy format: a resolution of 1e9 takes us2t for t2us.
		{"000003e8 00000040 3b9aca00 3b9aca00\n", 1000, ""},
		{"000003e8 00000040\n", 0, "fewer than 4 fields"},
		{"000003e8 0000zz40 000f4240 3b9aca00\n", 0, "field 2"},
		{"000003e8 00000000 000f4240 3b9aca00\n", 0, "us2t is 0"},
		// Found by FuzzConfig: a zero t2us or resolution made a 0 tick.
		{"0 10 0 00", 0, "gives 0 ticks per microsecond"},
		{"00000000 00000040 000f4240 3b9aca00\n", 0, "gives 0 ticks per microsecond"},
		{"000003e8 00000040 00000000 3b9aca00\n", 0, "gives 0 ticks per microsecond"},
	} {
		got, err := parsePsched(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %v %v, want %v", tt.in, got, err, tt.want)
		}
	}
	// The machine's own.
	if tick, err := pschedTick(); err != nil || tick <= 0 {
		t.Errorf("pschedTick: %v %v", tick, err)
	}
}

func TestIFBNames(t *testing.T) {
	// The name the reference's formula gives for this network and ifname.
	if got := legacyIFBName("mynet", "dummy"); got != "bwp1b29d9511ed2" {
		t.Errorf("legacy name %q", got)
	}
	names := map[string]bool{}
	for _, n := range []string{
		ifbName("mynet", "dummy", "eth0"),
		ifbName("mynet", "dummy", "eth1"),
		ifbName("mynet", "dummy2", "eth0"),
		ifbName("mynet2", "dummy", "eth0"),
		// Separators: "a"+"bc" and "ab"+"c" differ.
		ifbName("a", "bc", "eth0"),
		ifbName("ab", "c", "eth0"),
		legacyIFBName("mynet", "dummy"),
	} {
		if len(n) != 15 || !strings.HasPrefix(n, "bwp") {
			t.Errorf("name %q", n)
		}
		if names[n] {
			t.Errorf("name %q twice", n)
		}
		names[n] = true
	}
}

// TestParseConfig: which limits apply, and the validation errors with
// their texts, in the reference's order.
func TestParseConfig(t *testing.T) {
	rt := `"runtimeConfig":{"bandwidth":{"ingressRate":8000,"ingressBurst":800,"egressRate":16000,"egressBurst":1600}}`
	for _, tt := range []struct {
		name, fields string
		want         *BandwidthEntry
		err          string
	}{
		{"none", ``, nil, ""},
		{"runtime only", `,` + rt, &BandwidthEntry{8000, 800, 16000, 1600}, ""},
		{"top level only", `,"egressRate":100,"egressBurst":200`, &BandwidthEntry{0, 0, 100, 200}, ""},
		// Any top-level key shadows runtimeConfig wholesale, even a 0 or null.
		{"top level shadows", `,"ingressRate":0,` + rt, &BandwidthEntry{}, ""},
		{"null shadows", `,"egressBurst":null,` + rt, &BandwidthEntry{}, ""},
		{"case-insensitive keys", `,"IngressRate":800,"INGRESSBURST":80`, &BandwidthEntry{800, 80, 0, 0}, ""},
		// Keys of older reference versions are ignored.
		{"unshapedSubnets", `,"unshapedSubnets":["10.0.0.0/8"],` + rt, &BandwidthEntry{8000, 800, 16000, 1600}, ""},

		{"rate without burst", `,"ingressRate":100`, nil, "if rate is set, burst must also be set"},
		{"burst without rate", `,"egressBurst":100`, nil, "if burst is set, rate must also be set"},
		{"burst 4GB", `,"egressRate":100,"egressBurst":34359738360`, nil, "burst cannot be more than 4GB"},
		{"burst below 4GB", `,"egressRate":8,"egressBurst":34359738359`, &BandwidthEntry{0, 0, 8, 34359738359}, ""},
		{"runtime validated", `,"runtimeConfig":{"bandwidth":{"ingressBurst":1}}`, nil, "if burst is set, rate must also be set"},
		{"ingress before egress", `,"ingressRate":1,"egressBurst":1`, nil, "if rate is set, burst must also be set"},
		{"rate below 8", `,"ingressRate":7,"ingressBurst":800`, nil, "ingressRate must be at least 8 (bits per second), got 7"},
		{"burst below 8", `,"egressRate":800,"egressBurst":7`, nil, "egressBurst must be at least 8 (bits), got 7"},
		{"bucket below 1µs", `,"egressRate":80000000,"egressBurst":8`, nil,
			"egressBurst 8 is too small for egressRate 80000000: the bucket must hold at least 1µs of traffic"},
		{"wrong type", `,"ingressRate":"1M"`, nil,
			"failed to parse network configuration: json: cannot unmarshal string into Go struct field PluginConf.BandwidthEntry.ingressRate of type uint64"},
		{"negative", `,"egressBurst":-1`, nil,
			"failed to parse network configuration: json: cannot unmarshal number -1 into Go struct field PluginConf.BandwidthEntry.egressBurst of type uint64"},
		{"bad prevResult", `,"prevResult":{"ips":[{"address":"nope"}]}`, nil, "could not parse prevResult: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"bandwidth"` + tt.fields + `}`))
			if tt.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
					t.Errorf("error %v\n want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := c.bandwidth()
			if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
				t.Errorf("bandwidth %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestParseLenient: DEL and GC read only the common keys, so limits the
// reference would refuse do not stop them.
func TestParseLenient(t *testing.T) {
	for _, in := range []string{
		`{"name":"n","ingressRate":1}`,
		`{"name":"n","egressRate":8,"egressBurst":34359738360}`,
	} {
		if c, err := parseLenient([]byte(in)); err != nil || c.Name != "n" {
			t.Errorf("%s: %+v %v", in, c, err)
		}
	}
	if _, err := parseLenient([]byte(`{"name":"n","ipam":"x"}`)); err == nil {
		t.Error("bad common key accepted")
	}
}
