package loopback

import (
	"fmt"

	"github.com/nftcni/nftcni/cni"
)

// loadConf decodes what ADD reads of its config: the standard keys and
// the prevResult (nil when absent), which a chained loopback passes
// through as its result.
func loadConf(stdin []byte) (*cni.NetConf, *cni.Result, error) {
	conf, err := cni.DecodeNetConf(stdin, "failed to parse network config")
	if err != nil {
		return nil, nil, err
	}
	prev, err := conf.PrevResult()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse prevResult: %w", err)
	}
	return conf, prev, nil
}
