package ownertag

import (
	"testing"

	"github.com/nftcni/nftcni/cni"
)

func TestOwners(t *testing.T) {
	o := Of("net1", &cni.CmdArgs{ContainerID: "c1", IfName: "eth0"})
	if o.Network != "net1" || o.ContainerID != "c1" || o.IfName != "eth0" {
		t.Errorf("Owner: %+v", o)
	}
	valid := Valid("net1", []cni.Attachment{{ContainerID: "c1", IfName: "eth0"}, {ContainerID: "c2", IfName: "net1"}})
	if len(valid) != 2 || valid[0] != o || valid[1].ContainerID != "c2" || valid[1].IfName != "net1" || valid[1].Network != "net1" {
		t.Errorf("ValidOwners: %+v", valid)
	}
}
