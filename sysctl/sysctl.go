// Package sysctl reads and writes the kernel's sysctls (/proc/sys) inside a
// network namespace: the net.* ones are per namespace, and the kernel
// resolves /proc/sys/net by the namespace of the thread that opens the
// file, so each access runs on a thread inside the namespace (netns.NS.Do).
//
// It is its own package, beside netns at the bottom of the layers, because
// its users are on every layer: the address configuration of the interface
// plugins (IPv6 on, addresses kept on down), bridge and ptp (forwarding,
// proxy ARP), portmap's route_localnet (nft/portmap), the dhcp daemon.
// None of them should need the rtnetlink layer for a file write.
//
// The settings an ADD would otherwise read on every call where the file's
// cost grows with the host's network namespaces are also read over
// rtnetlink (devconf.go), with a socket of the package's own rather than
// netlinkx's.
package sysctl

import (
	"fmt"
	"os"
	"strings"

	"github.com/nftcni/nftcni/crashpoint"
	"github.com/nftcni/nftcni/netns"
)

// path turns a sysctl name into its file under /proc/sys. Names are
// slash form (net/ipv6/conf/eth0/accept_ra), so interface names containing
// dots are safe. A name with a dot before its first slash is dotted form
// (net.ipv4.ip_forward): dots and slashes are swapped, as sysctl(8) and the
// reference do (net.ipv4.conf.eth0/100.rp_filter is eth0.100's). Names that
// could leave /proc/sys are refused.
func path(orig string) (string, error) {
	name := orig
	dot := strings.IndexByte(name, '.')
	slash := strings.IndexByte(name, '/')
	if dot >= 0 && (slash < 0 || dot < slash) {
		name = strings.Map(func(r rune) rune {
			switch r {
			case '.':
				return '/'
			case '/':
				return '.'
			}
			return r
		}, name)
	}
	if name == "" || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("invalid sysctl name %q", orig)
	}
	for _, c := range strings.Split(name, "/") {
		if c == "" || c == "." || c == ".." || strings.ContainsRune(c, 0) {
			return "", fmt.Errorf("invalid sysctl name %q", orig)
		}
	}
	return "/proc/sys/" + name, nil
}

// inNS runs fn inside ns, or directly when ns is nil.
func inNS(ns *netns.NS, fn func() error) error {
	if ns == nil {
		return fn()
	}
	return ns.Do(fn)
}

// Get reads a sysctl inside ns (nil: the calling thread's namespace) and
// returns its value without surrounding whitespace. File errors are
// returned as os reports them (`open /proc/sys/...: no such file or
// directory`), which is the text the reference shows.
func Get(ns *netns.NS, name string) (string, error) {
	path, err := path(name)
	if err != nil {
		return "", err
	}
	var val string
	err = inNS(ns, func() error {
		b, err := os.ReadFile(path)
		val = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		return "", err
	}
	return val, nil
}

// Set writes value (no newline added) to a sysctl inside ns (nil: the
// calling thread's namespace). The file is opened for writing only, never
// created, so a missing sysctl fails with ENOENT.
func Set(ns *netns.NS, name, value string) error {
	path, err := path(name)
	if err != nil {
		return err
	}
	crashpoint.Hit("sysctl:write:before")
	err = inNS(ns, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(value); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	})
	crashpoint.Hit("sysctl:write:after")
	return err
}
