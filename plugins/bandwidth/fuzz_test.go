package bandwidth

import (
	"math"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin to the strict (ADD, CHECK) and lenient (DEL,
// GC) decoders and any text to the /proc/net/psched parser: never a panic;
// an accepted limit gives a TBF the kernel can use (non-zero rate, buffer
// and limit: the reference's division by zero and empty buckets stay
// out); a psched clock is finite and positive; the config round-trips
// (plugintest.Fixpoint).
func FuzzConfig(f *testing.F) {
	const rt = `"runtimeConfig":{"bandwidth":{"ingressRate":8000,"ingressBurst":800,"egressRate":16000,"egressBurst":1600}}`
	confs := []string{
		`{"cniVersion":"1.0.0","name":"n","type":"bandwidth"}`,
		`{"cniVersion":"1.0.0","name":"n",` + rt + `}`,
		`{"name":"n","egressRate":100,"egressBurst":200}`,
		`{"name":"n","ingressRate":0,` + rt + `}`,
		`{"name":"n","egressBurst":null,` + rt + `}`,
		`{"name":"n","IngressRate":800,"INGRESSBURST":80}`,
		`{"name":"n","egressRate":8,"egressBurst":34359738359}`,
		`{"name":"n","egressRate":80000000,"egressBurst":8}`,
		`{"name":"n","ingressRate":18446744073709551615,"ingressBurst":34359738359}`,
		`{"name":"n","egressBurst":-1}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"ips":[{"address":"10.0.0.2/24"}],"interfaces":[{"name":"eth0","sandbox":"/x"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"ips":[{"address":"nope"}]}}`,
	}
	for _, c := range confs {
		for _, p := range []string{"000003e8 00000040 000f4240 3b9aca00\n", "1 1 3b9aca00 1", "1 0 1 1", "ffffffff 1 ffffffff 0", "x"} {
			f.Add([]byte(c), p)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, psched string) {
		if tick, err := parsePsched(psched); err == nil && (tick <= 0 || math.IsInf(tick, 0) || math.IsNaN(tick)) {
			t.Fatalf("psched %q gives tick %v", psched, tick)
		}
		_, _ = parseLenient(data)
		c, err := loadConf(data)
		if err != nil {
			return
		}
		if bw := c.bandwidth(); bw != nil {
			for _, d := range []struct{ rate, burst uint64 }{{bw.IngressRate, bw.IngressBurst}, {bw.EgressRate, bw.EgressBurst}} {
				if d.rate == 0 {
					continue
				}
				tbf := tbfFor(d.rate, d.burst, 15.625) // every current kernel's clock
				if tbf.Rate == 0 || tbf.Buffer == 0 || tbf.Limit == 0 {
					t.Fatalf("rate %d burst %d accepted, TBF %+v", d.rate, d.burst, tbf)
				}
				_ = referenceTBF(d.rate, d.burst, 15.625)
			}
		}
		plugintest.Fixpoint(t, c, loadConf)
	})
}
