package dummy

import (
	"errors"

	"github.com/nftcni/nftcni/cni"
)

// errNoIPAM is the reference's message for a config without ipam.type,
// which ADD and CHECK refuse before doing anything.
var errNoIPAM = errors.New("dummy interface requires an IPAM configuration")

// loadConf decodes the config: dummy has only the standard keys, and
// ignores dns (the result carries IPAM's).
func loadConf(stdin []byte) (*cni.NetConf, error) {
	return cni.DecodeNetConf(stdin, "failed to parse network config")
}

// ipamOf decodes the config for DEL, GC and STATUS, which
// call IPAM unconditionally, as the reference (dummy cannot work without
// IPAM). DEL releases the addresses, then deletes the dummy; a missing
// link or namespace, or an empty CNI_NETNS, is success. dummy keeps no
// state of its own.
func ipamOf(stdin []byte) (string, bool, error) {
	conf, err := loadConf(stdin)
	if err != nil {
		return "", false, err
	}
	return conf.IPAM.Type, true, nil
}
