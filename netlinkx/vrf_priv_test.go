package netlinkx_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestVRF creates VRF devices in a throwaway namespace and reads their
// tables back (skips on kernels without the vrf driver).
func TestVRF(t *testing.T) {
	privtest.RequireLinkKind(t, "vrf")
	_, h := newNS(t)
	must(t, h.AddVRF("red", 10))
	must(t, h.AddVRF("blue", 70000))
	wantErr(t, h.AddVRF("red", 11), `adding VRF "red" (table 11): file exists`, unix.EEXIST)
	v, err := h.VRFByName("blue")
	must(t, err)
	if v.Name != "blue" || v.Kind != "vrf" || v.Table != 70000 {
		t.Errorf("blue %+v", v)
	}
	_, err = h.VRFByName("lo")
	wantErr(t, err, `looking up VRF "lo": not a VRF device`, netlinkx.ErrNotVRF)
	_, err = h.VRFByName("green")
	wantErr(t, err, `looking up VRF "green": Link not found`, netlinkx.ErrNotFound)
	vrfs, err := h.VRFs()
	must(t, err)
	tables := map[string]uint32{}
	for _, v := range vrfs {
		tables[v.Name] = v.Table
	}
	if len(tables) != 2 || tables["red"] != 10 || tables["blue"] != 70000 {
		t.Errorf("VRFs %+v", vrfs)
	}
}
