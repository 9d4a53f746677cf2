package hostdevice

import (
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin to the host-device config decoder, strict
// (ADD, CHECK) and lenient (DEL), against the fake sysfs tree, then
// resolves the selectors the way ADD does: never a panic; an accepted
// config names its PCI or auxiliary device by a single path element (so
// nothing outside /sys/bus/*/devices is looked up) and round-trips
// (plugintest.Fixpoint).
func FuzzConfig(f *testing.F) {
	root := fakeSysfs(f)
	for _, c := range []string{
		`{"device":"hd0"}`, `{"hwaddr":"02:00:00:00:00:01"}`, `{"hwaddr":"zz"}`,
		`{"kernelpath":"/sys/devices/pci0000:00/0000:00:1f.6"}`, `{"kernelpath":"/sys/devices/../../etc"}`,
		`{"pciBusID":"0000:00:1f.6"}`, `{"pciBusID":"0000:00:04.0"}`, `{"pciBusID":"0000:00:05.0","dpdkMode":true}`,
		`{"pciBusID":"0000:00:06.0"}`, `{"pciBusID":"0000:00:07.0"}`, `{"pciBusID":"../../../../etc"}`,
		`{"device":"x","DPDKMODE":true,"stateDir":""}`,
		`{"runtimeConfig":{"deviceID":"0000:00:05.0"}}`,
		`{"pciBusID":"0000:00:05.0","runtimeConfig":{"deviceID":"mlx5_core.sf.2"}}`,
		`{"device":"x","runtimeConfig":{"deviceID":"0000:00:1f.6/../../0000:00:05.0"}}`,
		`{"ipam":{"type":"static"}}`, `{"device":1}`, `{"device":"x","useInterfaceNetwork":true}`, `{"device":"x","UseInterfaceNetwork":"yes"}`,
	} {
		f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"host-device",` + strings.TrimPrefix(c, "{")))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = loadConf(data, root, true)
		c, err := loadConf(data, root, false)
		if err != nil {
			return
		}
		for _, sel := range []string{c.PCIAddr, c.auxDevice} {
			if sel == "." || sel == ".." || strings.ContainsAny(sel, "/\x00") {
				t.Fatalf("accepted device selector %q", sel)
			}
		}
		if c.StateDir == "" {
			t.Fatal("accepted config without a state directory")
		}
		_, _ = sysfsName(root, c)
		plugintest.Fixpoint(t, c, func(b []byte) (*NetConf, error) { return loadConf(b, root, false) })
	})
}
