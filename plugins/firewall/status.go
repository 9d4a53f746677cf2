package firewall

import (
	"context"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/firewalld"
)

// cmdStatus answers code 50 when `backend` is "firewalld" and firewalld
// does not run on the system bus: ADD would then fail. Without `backend`
// (or with "iptables") ADD falls back to, or is, the native nftables
// backend, which needs no daemon: ready. The reference always answers
// success.
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	if conf.Backend != "firewalld" {
		return nil
	}
	conn, err := firewalld.Connect(ctx)
	if err != nil {
		return cni.Errorf(cni.CodePluginNotAvailable, "firewalld backend: %v", err)
	}
	defer conn.Close()
	if !conn.Running(ctx) {
		return cni.Errorf(cni.CodePluginNotAvailable, "firewalld backend: firewalld is not running on the system bus")
	}
	return nil
}
