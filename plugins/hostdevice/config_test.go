package hostdevice

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

// No privileges needed: the selectors resolved against a sysfs-like tree
// of the test's own (the machine's real sysfs and devices are never
// looked at), and the config checks made before anything is touched.

// fakeSysfs builds a tree under a temporary root:
//
//	devices/pci0000:00/0000:00:1f.6/net/enp0s31f6   (kernelpath)
//	devices/pci0000:00/0000:00:02.0/                (kernelpath without net)
//	devices/platform/empty/net/                     (empty net directory)
//	bus/pci/devices/0000:00:1f.6 -> ../../../devices/pci0000:00/0000:00:1f.6, driver e1000e
//	bus/pci/devices/0000:00:04.0/virtio1/net/eth7   (virtio), driver virtio-pci
//	bus/pci/devices/0000:00:05.0/                   (DPDK: driver vfio-pci, no net)
//	bus/pci/devices/0000:00:06.0/                   (no driver bound)
//	bus/pci/devices/0000:00:07.0/net/               (empty), driver uio_pci_generic
//	bus/auxiliary/devices/mlx5_core.sf.2/net/enp0s8f0s2
func fakeSysfs(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	mkdir := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{
		"devices/pci0000:00/0000:00:1f.6/net/enp0s31f6",
		"devices/pci0000:00/0000:00:02.0",
		"devices/platform/empty/net",
		"bus/pci/drivers/e1000e", "bus/pci/drivers/virtio-pci", "bus/pci/drivers/vfio-pci", "bus/pci/drivers/uio_pci_generic",
		"bus/pci/devices/0000:00:04.0/virtio1/net/eth7",
		"bus/pci/devices/0000:00:05.0",
		"bus/pci/devices/0000:00:06.0",
		"bus/pci/devices/0000:00:07.0/net",
		"bus/auxiliary/devices/mlx5_core.sf.2/net/enp0s8f0s2",
	} {
		mkdir(d)
	}
	link("../../../devices/pci0000:00/0000:00:1f.6", "bus/pci/devices/0000:00:1f.6")
	link("../../../../bus/pci/drivers/e1000e", "devices/pci0000:00/0000:00:1f.6/driver")
	link("../../drivers/virtio-pci", "bus/pci/devices/0000:00:04.0/driver")
	link("../../drivers/vfio-pci", "bus/pci/devices/0000:00:05.0/driver")
	link("../../drivers/uio_pci_generic", "bus/pci/devices/0000:00:07.0/driver")
	return root
}

func TestLoadConfSelectors(t *testing.T) {
	root := fakeSysfs(t)
	for _, tt := range []struct {
		name, conf string
		lenient    bool
		pci, aux   string
		dpdk       bool
		code       uint
		err        string // with the root shown as ROOT
	}{
		{name: "device", conf: `{"device":"hd0"}`},
		{name: "pciBusID, kernel driver", conf: `{"pciBusID":"0000:00:1f.6"}`, pci: "0000:00:1f.6"},
		{name: "pciBusID, vfio-pci", conf: `{"pciBusID":"0000:00:05.0"}`, pci: "0000:00:05.0", dpdk: true},
		{name: "pciBusID, uio_pci_generic", conf: `{"pciBusID":"0000:00:07.0"}`, pci: "0000:00:07.0", dpdk: true},
		{name: "DPDKMode overwritten by detection", conf: `{"pciBusID":"0000:00:1f.6","dpdkMode":true}`, pci: "0000:00:1f.6"},
		{name: "DPDKMode without pciBusID kept", conf: `{"device":"x","DPDKMODE":true}`, dpdk: true},
		{name: "deviceID is a PCI device", conf: `{"runtimeConfig":{"deviceID":"0000:00:05.0"}}`, pci: "0000:00:05.0", dpdk: true},
		{name: "deviceID replaces pciBusID", conf: `{"pciBusID":"0000:00:05.0","runtimeConfig":{"deviceID":"0000:00:1f.6"}}`, pci: "0000:00:1f.6"},
		{name: "deviceID is an auxiliary device", conf: `{"pciBusID":"0000:00:05.0","runtimeConfig":{"deviceID":"mlx5_core.sf.2"}}`, aux: "mlx5_core.sf.2"},
		{name: "deviceID unknown", conf: `{"device":"x","runtimeConfig":{"deviceID":"0000:09:00.0"}}`, code: cni.CodeInternal,
			err: "runtime config DeviceID 0000:09:00.0 not found or unsupported"},
		{name: "no selector", conf: `{"ipam":{"type":"static"}}`, code: cni.CodeInvalidNetworkConfig,
			err: `specify either "device", "hwaddr", "kernelpath" or "pciBusID"`},
		{name: "no driver bound", conf: `{"pciBusID":"0000:00:06.0"}`, code: cni.CodeInternal,
			err: "error with host device: readlink ROOT/bus/pci/devices/0000:00:06.0/driver: no such file or directory"},
		{name: "no driver bound, DEL", conf: `{"pciBusID":"0000:00:06.0"}`, lenient: true, pci: "0000:00:06.0"},
		// Path-like selectors would be joined under /sys/bus/*/devices.
		{name: "pciBusID path", conf: `{"pciBusID":"../../../../etc"}`, code: cni.CodeInvalidNetworkConfig,
			err: `invalid pciBusID "../../../../etc": not a device name`},
		{name: "pciBusID dot-dot", conf: `{"pciBusID":".."}`, code: cni.CodeInvalidNetworkConfig,
			err: `invalid pciBusID "..": not a device name`},
		// DEL does not fail over it (nor look it up).
		{name: "pciBusID path, DEL", conf: `{"pciBusID":"../../../../etc"}`, lenient: true, pci: "../../../../etc"},
		{name: "bad pciBusID replaced by deviceID", conf: `{"pciBusID":"..","runtimeConfig":{"deviceID":"0000:00:05.0"}}`, lenient: true, pci: "0000:00:05.0", dpdk: true},
		{name: "deviceID path", conf: `{"device":"x","runtimeConfig":{"deviceID":"0000:00:1f.6/../../0000:00:05.0"}}`, code: cni.CodeInvalidNetworkConfig,
			err: `invalid runtimeConfig.deviceID "0000:00:1f.6/../../0000:00:05.0": not a device name`},
		{name: "wrong type", conf: `{"device":1}`, code: cni.CodeInternal,
			err: "failed to load netconf: json: cannot unmarshal number into Go struct field NetConf.device of type string"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConf([]byte(tt.conf), root, tt.lenient)
			if plugintest.ConfError(t, err, tt.code, strings.ReplaceAll(tt.err, "ROOT", root)) {
				return
			}
			if c.PCIAddr != tt.pci || c.auxDevice != tt.aux || c.DPDKMode != tt.dpdk {
				t.Errorf("pci %q aux %q dpdk %v", c.PCIAddr, c.auxDevice, c.DPDKMode)
			}
			if c.StateDir != defaultStateDir {
				t.Errorf("state dir %q", c.StateDir)
			}
		})
	}
}

func TestSysfsName(t *testing.T) {
	root := fakeSysfs(t)
	for _, tt := range []struct {
		name string
		conf NetConf
		want string
		err  string
	}{
		{name: "kernelpath", conf: NetConf{KernelPath: "/sys/devices/pci0000:00/0000:00:1f.6"}, want: "enp0s31f6"},
		{name: "kernelpath with trailing slash", conf: NetConf{KernelPath: "/sys/devices/pci0000:00/0000:00:1f.6/"}, want: "enp0s31f6"},
		{name: "kernelpath relative", conf: NetConf{KernelPath: "sys/devices/pci0000:00/0000:00:1f.6"},
			err: `kernel device path "sys/devices/pci0000:00/0000:00:1f.6" must be absolute and begin with /sys/devices/`},
		{name: "kernelpath outside /sys/devices", conf: NetConf{KernelPath: "/sys/bus/pci/devices/0000:00:1f.6"},
			err: `kernel device path "/sys/bus/pci/devices/0000:00:1f.6" must be absolute and begin with /sys/devices/`},
		{name: "kernelpath escaping", conf: NetConf{KernelPath: "/sys/devices/../../etc"},
			err: "no net directory under kernel device path /sys/devices/../../etc"},
		{name: "kernelpath without net", conf: NetConf{KernelPath: "/sys/devices/pci0000:00/0000:00:02.0"},
			err: "no net directory under kernel device path /sys/devices/pci0000:00/0000:00:02.0"},
		{name: "kernelpath empty net", conf: NetConf{KernelPath: "/sys/devices/platform/empty"},
			err: "failed to find network device in path /sys/devices/platform/empty/net"},
		{name: "pciBusID through the bus symlink", conf: NetConf{PCIAddr: "0000:00:1f.6"}, want: "enp0s31f6"},
		{name: "pciBusID virtio", conf: NetConf{PCIAddr: "0000:00:04.0"}, want: "eth7"},
		{name: "pciBusID without net", conf: NetConf{PCIAddr: "0000:00:05.0"}, err: "no net directory under pci device 0000:00:05.0"},
		{name: "pciBusID empty net", conf: NetConf{PCIAddr: "0000:00:07.0"},
			err: "failed to find network device in path /sys/bus/pci/devices/0000:00:07.0/net"},
		{name: "kernelpath beats pciBusID", conf: NetConf{KernelPath: "/sys/devices/pci0000:00/0000:00:1f.6", PCIAddr: "0000:00:04.0"}, want: "enp0s31f6"},
		{name: "auxiliary", conf: NetConf{auxDevice: "mlx5_core.sf.2"}, want: "enp0s8f0s2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sysfsName(root, &tt.conf)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Errorf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("%q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestStatePath(t *testing.T) {
	if got := statePath("/run/x", "c1.a-b", "net1"); got != "/run/x/c1.a-b:net1.json" {
		t.Errorf("state path %s", got)
	}
}
