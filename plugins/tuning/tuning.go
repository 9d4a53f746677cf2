// Package tuning is the "tuning" chained plugin: inside the container's
// namespace it writes net sysctls and changes link attributes of the
// container interface (MAC, MTU, promiscuous and all-multicast mode,
// transmit queue length), recording the link's previous values in a backup
// file that DEL restores. The prevResult is passed through, with the
// interface's new MAC.
//
// It behaves like the reference tuning plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md.
package tuning

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/plugins/internal/rollback"
)

// Plugin is the tuning plugin. GC collects the backups of attachments
// that no longer exist; ADD depends on no daemon, so STATUS is always
// ready.
var Plugin = &cni.Plugin{
	Name:   "tuning",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cni.AlwaysReady,
	Validate: func(stdin []byte) error {
		if err := checkDuplicateSysctls(stdin); err != nil {
			return err
		}
		_, err := loadConf(stdin, "")
		return err
	},
}

// prevResult returns the config's prevResult, required by ADD and CHECK.
func prevResult(c *TuningConf) (*cni.Result, error) {
	if c.RawPrevResult == nil {
		return nil, errors.New("Required prevResult missing")
	}
	r, err := c.PrevResult()
	if err != nil {
		return nil, err
	}
	if r == nil { // "prevResult": null
		return nil, errors.New("Required prevResult missing")
	}
	return r, nil
}

// allowlistPath is the allow-list the invocation uses (AllowlistEnv, else
// AllowlistFile).
func allowlistPath(a *cni.CmdArgs) string {
	if p := cni.EnvFromList(a.Env)(AllowlistEnv); p != "" {
		return p
	}
	return AllowlistFile
}

// cmdAdd validates everything first — duplicate keys, config, CNI_ARGS,
// allow-list, prevResult, every sysctl key, the link fields — so that a
// refused ADD has changed nothing. Then, in the container's namespace: the
// sysctls in sorted order; if link attributes are asked for, the backup,
// then MAC, promisc, MTU, allmulti, txqueuelen. A failure at any step puts
// back what was already changed (the reference leaves it) and the previous
// backup file.
func cmdAdd(_ context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	if err := checkDuplicateSysctls(a.StdinData); err != nil {
		return nil, err
	}
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return nil, err
	}
	al, present, err := readAllowlist(allowlistPath(a))
	if err != nil {
		return nil, err
	}
	if present {
		if err := al.check(conf.sortedKeys()); err != nil {
			return nil, err
		}
	}
	result, err := prevResult(conf)
	if err != nil {
		return nil, err
	}
	entries, err := planSysctls(conf, a.IfName)
	if err != nil {
		return nil, err
	}
	if err := conf.validateLink(); err != nil {
		return nil, err
	}

	ns, err := netns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer ns.Close()

	var h *netlinkx.Handle // opened only for link attributes
	defer func() {
		if h != nil {
			h.Close()
		}
	}()
	// Registered after the closes above, so it runs before them.
	undo := rollback.New("tuning", a)
	defer undo.End(&err)

	if len(entries) > 0 {
		u, err := applySysctls(ns, entries, a.Logf)
		if err != nil {
			return nil, err
		}
		undo.Push("", u)
	}
	if !conf.changesLink() {
		return result, nil
	}

	if h, err = netlinkx.Open(ns); err != nil {
		return nil, err
	}
	l, flags, err := h.LinkByNameFlags(a.IfName)
	if err != nil {
		return nil, fmt.Errorf("failed to get %q: %w", a.IfName, netlinkx.Cause(err))
	}
	b := newBackup(conf, l, flags)
	u, err := saveBackup(conf.DataDir, backupName(a.ContainerID, a.IfName), b)
	if err != nil {
		return nil, err
	}
	undo.Push("", u)
	undo.Push("", func() error { return restoreLink(h, a.IfName, b) })

	if err := setLink(h, a.IfName, conf); err != nil {
		return nil, err
	}
	if conf.Mac != "" {
		for _, i := range result.Interfaces {
			if i.Name == a.IfName {
				i.Mac = conf.Mac // as given, not normalised, like the reference
			}
		}
	}
	return result, nil
}

// saveBackup writes b as dir/name, replacing any earlier backup as the
// reference does, and returns how to put the earlier state back.
func saveBackup(dir, name string, b backup) (undo func() error, err error) {
	path := filepath.Join(dir, name)
	prev, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read backup %s: %w", path, err)
	}
	if err := writeFileAtomic(dir, name, b.encode()); err != nil {
		return nil, err
	}
	return func() error {
		if prev != nil {
			return writeFileAtomic(dir, name, prev)
		}
		return removeFile(path)
	}, nil
}

// setLink applies the link attributes in the reference's order: MAC,
// promisc (on only), MTU, allmulti, txqueuelen. Errors carry the kernel's
// reason, as the reference's do.
func setLink(h *netlinkx.Handle, ifName string, c *TuningConf) error {
	if c.Mac != "" {
		mac, err := parseMAC(c.Mac)
		if err != nil {
			return err
		}
		if err := h.SetMAC(ifName, mac); err != nil {
			return netlinkx.Cause(err)
		}
	}
	if c.Promisc {
		if err := h.SetPromisc(ifName, true); err != nil {
			return netlinkx.Cause(err)
		}
	}
	if c.MTU != 0 {
		if err := h.SetMTU(ifName, c.MTU); err != nil {
			return netlinkx.Cause(err)
		}
	}
	if c.Allmulti != nil {
		if err := h.SetAllMulti(ifName, *c.Allmulti); err != nil {
			return netlinkx.Cause(err)
		}
	}
	if c.TxQLen != nil {
		if err := h.SetTxQueueLen(ifName, *c.TxQLen); err != nil {
			return netlinkx.Cause(err)
		}
	}
	return nil
}

// cmdDel restores the link attributes recorded at ADD and removes the
// backup. Config and CNI_ARGS errors fail DEL, as in the
// reference; nothing else does. Unlike the reference, the backup is removed
// in every case — namespace or interface gone, empty CNI_NETNS, an
// unreadable file, a failed restore (reported on stderr) — so none leaks
// and a repeated DEL finds nothing to do.
func cmdDel(_ context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	path := filepath.Join(conf.DataDir, backupName(a.ContainerID, a.IfName))
	removeScratch(conf.DataDir, backupName(a.ContainerID, a.IfName))
	data, err := readFile(path)
	if err != nil {
		a.Logf("tuning: reading backup: %v", err)
	}
	if data == nil && err == nil {
		return nil // nothing was backed up, or DEL already ran
	}
	if err == nil {
		if rerr := restoreFrom(a, data); rerr != nil {
			a.Logf("tuning: not restored: %v", rerr)
		}
	}
	return removeFile(path)
}

// restoreFrom restores the backup data on the container interface, if the
// namespace and the interface are still there.
func restoreFrom(a *cni.CmdArgs, data []byte) error {
	var b backup
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("invalid backup: %w", err)
	}
	if a.Netns == "" {
		return nil
	}
	h, err := netlinkx.OpenPath(a.Netns)
	if errors.Is(err, netns.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := h.LinkByName(a.IfName); errors.Is(err, netlinkx.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	return restoreLink(h, a.IfName, b)
}

// cmdCheck verifies the sysctls and the link attributes the config asks
// for. The allow-list is not consulted, as in the
// reference. Unlike the reference, MACs are compared as addresses, not as
// strings (an upper-case configured MAC no longer always fails).
func cmdCheck(_ context.Context, a *cni.CmdArgs) error {
	if err := checkDuplicateSysctls(a.StdinData); err != nil {
		return err
	}
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	if _, err := prevResult(conf); err != nil {
		return err
	}
	entries, err := planSysctls(conf, a.IfName)
	if err != nil {
		return err
	}
	h, err := netlinkx.OpenPath(a.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := checkSysctls(h.NS(), entries); err != nil {
		return err
	}
	l, flags, err := h.LinkByNameFlags(a.IfName)
	if err != nil {
		return fmt.Errorf("Cannot find container link %v", a.IfName)
	}
	return checkLink(a.IfName, conf, l, flags)
}

// checkLink compares the link with the config, with the reference's
// messages. Promisc is two-sided as in the reference: not asked for means
// the link must not be promiscuous.
func checkLink(ifName string, c *TuningConf, l netlinkx.Link, flags uint32) error {
	if c.Mac != "" {
		mac, err := parseMAC(c.Mac)
		if err != nil {
			return err
		}
		if mac.String() != l.MAC.String() {
			return fmt.Errorf("Error: Tuning configured Ethernet of %s is %s, current value is %s", ifName, c.Mac, l.MAC)
		}
	}
	if c.Promisc != l.Promisc {
		return fmt.Errorf("Error: Tuning link %s configured promisc is %v, current value is %d", ifName, c.Promisc, b2i(l.Promisc))
	}
	if c.MTU != 0 && c.MTU != l.MTU {
		return fmt.Errorf("Error: Tuning configured MTU of %s is %d, current value is %d", ifName, c.MTU, l.MTU)
	}
	if c.Allmulti != nil {
		if cur := flags&unix.IFF_ALLMULTI != 0; cur != *c.Allmulti {
			return fmt.Errorf("Error: Tuning configured all-multicast mode of %s is %v, current value is %v", ifName, *c.Allmulti, cur)
		}
	}
	if c.TxQLen != nil && *c.TxQLen != l.TxQueueLen {
		return fmt.Errorf("Error: Tuning configured Transmit Queue Length of %s is %d, current value is %d", ifName, *c.TxQLen, l.TxQueueLen)
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cmdGC removes the backups this network's ADD wrote for attachments that
// are not in cni.dev/valid-attachments. Without that key nothing is
// collected (and stderr says so); an empty list makes every backup of the
// network stale.
func cmdGC(_ context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	atts, ok := conf.Attachments()
	if !ok {
		a.Logf("tuning: GC without cni.dev/valid-attachments: nothing collected")
		return nil
	}
	keep := make(map[string]bool, len(atts))
	for _, at := range atts {
		keep[backupName(at.ContainerID, at.IfName)] = true
	}
	return collect(conf.DataDir, conf.Name, keep)
}
