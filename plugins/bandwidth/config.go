package bandwidth

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/nftcni/nftcni/cni"
)

// BandwidthEntry is one set of limits: rates in bits per
// second, bursts in bits; 0 means no limit. The type names follow the
// reference's, which appear in JSON decoding errors.
type BandwidthEntry struct {
	IngressRate  uint64 `json:"ingressRate"`  // towards the container
	IngressBurst uint64 `json:"ingressBurst"` //
	EgressRate   uint64 `json:"egressRate"`   // out of the container
	EgressBurst  uint64 `json:"egressBurst"`  //
}

// isZero reports an entry that limits nothing.
func (b *BandwidthEntry) isZero() bool {
	return b.IngressRate == 0 && b.IngressBurst == 0 && b.EgressRate == 0 && b.EgressBurst == 0
}

// PluginConf is the bandwidth configuration.
type PluginConf struct {
	cni.NetConf
	RuntimeConfig struct {
		Bandwidth *BandwidthEntry `json:"bandwidth,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	// The top-level keys. encoding/json allocates the embedded pointer as
	// soon as any of the four keys is present (even as null), which is
	// exactly the reference's "any top-level key shadows runtimeConfig
	// wholesale" rule.
	*BandwidthEntry

	// prev is the parsed prevResult, nil when absent.
	prev *cni.Result
}

// bandwidth is the effective entry: the top-level keys if any is present,
// else runtimeConfig.bandwidth, else nil.
func (c *PluginConf) bandwidth() *BandwidthEntry {
	if c.BandwidthEntry != nil {
		return c.BandwidthEntry
	}
	return c.RuntimeConfig.Bandwidth
}

// loadConf decodes and validates the configuration (ADD and CHECK), in
// the reference's order: JSON, the limits of each direction, prevResult.
func loadConf(stdin []byte) (*PluginConf, error) {
	var c PluginConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("failed to parse network configuration: %w", err)
	}
	if bw := c.bandwidth(); bw != nil {
		if err := validateRateAndBurst("ingress", bw.IngressRate, bw.IngressBurst); err != nil {
			return nil, err
		}
		if err := validateRateAndBurst("egress", bw.EgressRate, bw.EgressBurst); err != nil {
			return nil, err
		}
	}
	prev, err := c.PrevResult() // "could not parse prevResult: ..."
	if err != nil {
		return nil, err
	}
	c.prev = prev
	return &c, nil
}

// parseLenient decodes only the keys every plugin has, for DEL and GC:
// neither depends on the limits, and a DEL that fails over a value that
// never could have been applied would be retried by the runtime forever
// (the reference validates the limits on DEL too).
func parseLenient(stdin []byte) (*cni.NetConf, error) {
	return cni.DecodeNetConf(stdin, "failed to parse network configuration")
}

// validateRateAndBurst checks one direction's pair. The first three
// checks and their texts are the reference's; the rest reject what the
// reference lets through to a division by zero or a zero-sized bucket,
// naming the field.
func validateRateAndBurst(dir string, rate, burst uint64) error {
	switch {
	case burst == 0 && rate != 0:
		return errors.New("if rate is set, burst must also be set")
	case rate == 0 && burst != 0:
		return errors.New("if burst is set, rate must also be set")
	case burst/8 >= math.MaxUint32:
		return errors.New("burst cannot be more than 4GB")
	case rate == 0:
		return nil
	case rate < 8:
		return fmt.Errorf("%sRate must be at least 8 (bits per second), got %d", dir, rate)
	case burst < 8:
		return fmt.Errorf("%sBurst must be at least 8 (bits), got %d", dir, burst)
	case bucketMicros(rate/8, burst/8) == 0:
		return fmt.Errorf("%sBurst %d is too small for %sRate %d: the bucket must hold at least 1µs of traffic", dir, burst, dir, rate)
	}
	return nil
}
