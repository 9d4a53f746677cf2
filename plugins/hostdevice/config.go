package hostdevice

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
)

// sysfsRoot is where sysfs is mounted; the unit tests point it at a
// sysfs-like tree of their own.
var sysfsRoot = "/sys"

// defaultStateDir holds what DEL needs to give a device back as it was
// (state.go). Under /run: the state means nothing after a reboot, when
// every device is back in the host anyway.
const defaultStateDir = "/run/nftcni/host-device"

// dpdkDrivers are the userspace-I/O drivers: a PCI device bound to one
// has no kernel network interface to move (DPDK mode).
var dpdkDrivers = []string{"vfio-pci", "uio_pci_generic", "igb_uio"}

// NetConf is the host-device plugin's configuration. Keys match
// case-insensitively, as encoding/json does for the reference.
type NetConf struct {
	cni.NetConf
	Device     string `json:"device"`
	HWAddr     string `json:"hwaddr"`
	KernelPath string `json:"kernelpath"`
	PCIAddr    string `json:"pciBusID"`
	// DPDKMode has no JSON name in the reference either, so any spelling
	// of "dpdkmode" sets it; with pciBusID it is detected instead.
	DPDKMode      bool
	RuntimeConfig struct {
		DeviceID string `json:"deviceID"`
	} `json:"runtimeConfig"`
	// StateDir is our addition: where the host-side state of moved devices
	// is kept (default /run/nftcni/host-device).
	StateDir string `json:"stateDir"`
	// UseInterfaceNetwork takes the device's layer 3 along into the
	// container: its global addresses, its routes and the policy rules
	// that route its addresses (network.go). For cloud VMs whose second
	// NIC carries its own addresses and routes.
	UseInterfaceNetwork bool `json:"useInterfaceNetwork"`

	// auxDevice is an auxiliary-bus device named by runtimeConfig.deviceID.
	auxDevice string
}

// isL3 reports whether IPAM is configured.
func (c *NetConf) isL3() bool { return c.IPAM.Type != "" }

// loadConf decodes the config and resolves the device selectors against
// sysfs under root, in the reference's order: runtimeConfig.deviceID
// becomes pciBusID or an auxiliary device; one selector is required; a
// PCI device's driver decides DPDK mode. With lenient (DEL), a driver that
// cannot be read is not an error: DEL must not fail because a device
// changed drivers or vanished meanwhile.
func loadConf(stdin []byte, root string, lenient bool) (*NetConf, error) {
	c := &NetConf{StateDir: defaultStateDir}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	if c.StateDir == "" {
		c.StateDir = defaultStateDir
	}
	// A path-like pciBusID is refused, except by DEL, which then does not
	// look it up (as for an unreadable driver); a path-like deviceID is
	// refused like an unknown one.
	badPCI := sysfsElement("pciBusID", c.PCIAddr)
	if badPCI != nil && !lenient {
		return nil, badPCI
	}
	if err := sysfsElement("runtimeConfig.deviceID", c.RuntimeConfig.DeviceID); err != nil {
		return nil, err
	}
	if id := c.RuntimeConfig.DeviceID; id != "" {
		switch {
		case exists(filepath.Join(root, "bus/pci/devices", id)):
			c.PCIAddr = id
		case exists(filepath.Join(root, "bus/auxiliary/devices", id)):
			c.auxDevice = id
			c.PCIAddr = ""
		default:
			return nil, fmt.Errorf("runtime config DeviceID %s not found or unsupported", id)
		}
	}
	if c.Device == "" && c.HWAddr == "" && c.KernelPath == "" && c.PCIAddr == "" && c.auxDevice == "" {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, `specify either "device", "hwaddr", "kernelpath" or "pciBusID"`)
	}
	if c.PCIAddr != "" && c.PCIAddr == c.RuntimeConfig.DeviceID {
		badPCI = nil // replaced by a checked deviceID
	}
	if c.PCIAddr != "" && badPCI == nil {
		dpdk, err := hasDPDKDriver(root, c.PCIAddr)
		switch {
		case err == nil:
			c.DPDKMode = dpdk
		case lenient:
			c.DPDKMode = false
		default:
			return nil, fmt.Errorf("error with host device: %w", err)
		}
	}
	return c, nil
}

// sysfsElement refuses a device selector that is not a single path
// element: pciBusID and deviceID are joined under /sys/bus/*/devices, and
// "../../../etc" would make the plugin read driver links and "net"
// directories anywhere (the reference joins them unchecked). A PCI address
// or an auxiliary device name never has a "/".
func sysfsElement(key, v string) error {
	if v != "" && (v == "." || v == ".." || strings.ContainsAny(v, "/\x00")) {
		return cni.Errorf(cni.CodeInvalidNetworkConfig, "invalid %s %q: not a device name", key, v)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// hasDPDKDriver reports whether the PCI device is bound to a userspace-I/O
// driver.
func hasDPDKDriver(root, pciAddr string) (bool, error) {
	target, err := os.Readlink(filepath.Join(root, "bus/pci/devices", pciAddr, "driver"))
	if err != nil {
		return false, err
	}
	return slices.Contains(dpdkDrivers, filepath.Base(target)), nil
}

// findDevice finds the host link the config selects, by priority: device,
// hwaddr, kernelpath, pciBusID, auxiliary device.
func findDevice(h *netlinkx.Handle, root string, c *NetConf) (netlinkx.Link, error) {
	name := c.Device
	switch {
	case c.Device != "":
	case c.HWAddr != "":
		hw, err := net.ParseMAC(c.HWAddr)
		if err != nil {
			return netlinkx.Link{}, fmt.Errorf("failed to parse MAC address %q: %w", c.HWAddr, err)
		}
		links, err := h.Links()
		if err != nil {
			return netlinkx.Link{}, err
		}
		for _, l := range links {
			if l.MAC.String() == hw.String() {
				return l, nil
			}
		}
		return netlinkx.Link{}, errors.New("failed to find physical interface")
	default:
		var err error
		if name, err = sysfsName(root, c); err != nil {
			return netlinkx.Link{}, err
		}
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return netlinkx.Link{}, netlinkx.Cause(err) // "Link not found", as the reference says
	}
	return l, nil
}

// sysfsName is the interface name sysfs shows for the kernelpath, pciBusID
// or auxiliary-device selector: the first entry of the device's net
// directory. Paths in the config are absolute /sys paths; they are read
// under root.
func sysfsName(root string, c *NetConf) (string, error) {
	var dir string
	switch {
	case c.KernelPath != "":
		p := c.KernelPath
		if !filepath.IsAbs(p) || !strings.HasPrefix(p, "/sys/devices/") {
			return "", fmt.Errorf("kernel device path %q must be absolute and begin with /sys/devices/", p)
		}
		dir = filepath.Join(root, strings.TrimPrefix(filepath.Clean(p), "/sys"), "net")
		if !exists(dir) {
			return "", fmt.Errorf("no net directory under kernel device path %s", p)
		}
	case c.PCIAddr != "":
		dev := filepath.Join(root, "bus/pci/devices", c.PCIAddr)
		dir = filepath.Join(dev, "net")
		if !exists(dir) {
			// A virtio device's interface hangs off its virtioN child.
			matches, _ := filepath.Glob(filepath.Join(dev, "virtio*", "net"))
			if len(matches) == 0 {
				return "", fmt.Errorf("no net directory under pci device %s", c.PCIAddr)
			}
			dir = matches[0]
		}
	case c.auxDevice != "":
		dir = filepath.Join(root, "bus/auxiliary/devices", c.auxDevice, "net")
		if !exists(dir) {
			return "", fmt.Errorf("no net directory under auxiliary device %s", c.auxDevice)
		}
	default:
		return "", errors.New(`specify either "device", "hwaddr", "kernelpath" or "pciBusID"`)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return "", fmt.Errorf("failed to find network device in path %s", displayPath(root, dir))
	}
	return entries[0].Name(), nil
}

// displayPath shows a path under root as the /sys path it stands for.
func displayPath(root, p string) string {
	if root == "/sys" {
		return p
	}
	if rel, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(rel, "..") {
		return filepath.Join("/sys", rel)
	}
	return p
}

// check is the offline check ADD makes before it moves anything (and the
// Validate hook): the device's name, when one is named, and the IPAM
// config.
func (c *NetConf) check(stdin []byte) error {
	if c.Device != "" {
		if err := cni.IfNameFits("device", c.Device); err != nil {
			return err
		}
	}
	return cni.ValidateIPAM(c.IPAM.Type, stdin)
}
