package portmap

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/sysctl"
)

// route_localnet bookkeeping.
//
// A host process reaching a container through 127.0.0.1:<hostPort> sends
// packets that, after DNAT in the output hook, still carry a loopback
// source when the kernel routes them out of the interface towards the
// container; it refuses that unless net.ipv4.conf.<if>.route_localnet is
// set (postrouting's masquerade comes after routing). So Setup sets it on
// every interface in Spec.Localnet, as the reference does. Unlike the
// reference, the setting is given back: when the last attachment with
// localhost forwarding through an interface goes (Teardown, GC, or a Setup
// moving it elsewhere), the interface gets the value it had before nftcni
// first set it.
//
// "Last attachment on that interface" is decided from nftables state, in
// the same generation-guarded batch that removes the attachment's other
// elements, so two DELs can never both think the other one is still there:
//
//	set localnet {
//		type ifname . ifname
//		elements = { "cni0" . "<attachment hash>" comment "<owner tag>" }
//	}
//	map localnet_prior {
//		type ifname : mark
//		elements = { "cni0" : 0x00000000 comment "nftcni portmap: route_localnet before nftcni" }
//	}
//
// localnet holds one owner-tagged record per attachment and interface, so
// DEL and GC remove it with the attachment's other elements, by tag.
// localnet_prior holds, per interface, the value to restore; it belongs to
// the interface, not to an attachment, so it carries no owner tag: only
// the bookkeeping below adds and removes it. A per-interface file would
// not do: /run is shared by every network namespace, nftables state is
// per namespace like the sysctl.
//
// Crash safety comes from the order of the writes. Setup commits the
// record and (for the interface's first record) the prior value before it
// sets route_localnet; a Setup killed in between leaves the setting off,
// never on without a record. Teardown and GC restore the prior value
// before the batch that removes the last record and the prior value
// commits; one killed in between leaves the records, so the next DEL or GC
// restores again and removes them. So the prior value is never lost while
// nftcni's own value is in force, and the setting is never left on for an
// interface without records. All of it runs under nftcni's writer lock for
// the namespace (nft.Conn.Update), so a concurrent ADD cannot read the
// setting as "prior" while a DEL is giving it back.

// sysctlAccess reads and writes the route_localnet sysctls of a namespace
// (nil: the caller's).
type sysctlAccess struct {
	get func(ns *netns.NS, name string) (string, error)
	set func(ns *netns.NS, name, value string) error
}

// kernelSysctls are the namespace's own, what every caller gets.
var kernelSysctls = sysctlAccess{readLocalnet, sysctl.Set}

// sysctlFakes are the sysctls the package's tests put under a namespace
// handle of their own (*netns.NS → sysctlAccess): a golden test's fake
// nf_tables handle (nfttest.Fake.NS), a live test's namespace whose writes
// it intercepts. Each test has its own handle, so they run in parallel;
// nothing else adds to it.
var sysctlFakes sync.Map

// sysctls are the route_localnet sysctls of ns: kernelSysctls unless a
// test put a fake under ns.
func sysctls(ns *netns.NS) sysctlAccess {
	if ns != nil {
		if a, ok := sysctlFakes.Load(ns); ok {
			return a.(sysctlAccess)
		}
	}
	return kernelSysctls
}

// readLocalnet reads a route_localnet sysctl the way that does not grow
// with the host's containers: from the interface's RTM_GETLINK answer
// (sysctl.IPv4Devconf) rather than its file, whose path the kernel
// resolves by comparing each component with an entry per network
// namespace that has used it — +0.6 ms of CPU per access with 1000
// containers on the host. The file is the fallback, and gives the error
// texts of a missing interface.
func readLocalnet(ns *netns.NS, name string) (string, error) {
	if ifName, ok := strings.CutSuffix(strings.TrimPrefix(name, "net/ipv4/conf/"), "/route_localnet"); ok && localnetSysctl(ifName) == name {
		if v, err := sysctl.IPv4Devconf(ns, ifName, sysctl.IPv4RouteLocalnet); err == nil {
			return strconv.FormatUint(uint64(v), 10), nil
		}
	}
	return sysctl.Get(ns, name)
}

// priorComment is the comment of localnet_prior's elements.
const priorComment = "nftcni portmap: route_localnet before nftcni"

func localnetSysctl(ifName string) string { return "net/ipv4/conf/" + ifName + "/route_localnet" }

// localnetRecord is owner's record of using ifName.
func localnetRecord(ifName string, owner ownerid.Owner) nft.Element {
	return nft.Element{Key: nft.Concat(nft.IfnameKey(ifName), []byte(owner.AttachmentHash())), Comment: owner.Tag()}
}

// recordIface is the interface a localnet record is for.
func recordIface(e nft.Element) string {
	if len(e.Key) < 16 {
		return ""
	}
	return string(bytes.TrimRight(e.Key[:16], "\x00"))
}

func priorKey(ifName string) []byte { return nft.IfnameKey(ifName) }

// localnetPlan adds to tx's batch what keeps localnet_prior in step with a
// batch after which the interfaces in users carry localnet records, wanted
// being the ones Setup records (and will set route_localnet on, after the
// commit). priors is what localnet_prior holds: all of it when complete,
// else only the entries of wanted (the fast path, which removes no record
// and so restores nothing).
//
// An interface whose last record goes gets its prior value back now,
// before the commit (see above); an interface that is gone needs nothing.
// A restore that fails otherwise keeps the prior value for the next
// Teardown or GC to try again, and is returned as warn.
func localnetPlan(tx *nft.Tx, ns *netns.NS, priors []nft.Element, users map[string]bool, wanted []string, complete bool) (warn error, err error) {
	set := fam4.localnetPrior
	have := map[string]bool{}
	var gone []nft.Element
	for _, e := range priors {
		name := string(bytes.TrimRight(e.Key, "\x00"))
		have[name] = true
		if !complete || users[name] {
			continue
		}
		if len(e.Val) != 4 {
			gone = append(gone, e) // not ours to interpret
			continue
		}
		v := int32(binaryutil.NativeEndian.Uint32(e.Val))
		err := sysctls(ns).set(ns, localnetSysctl(name), strconv.Itoa(int(v)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			warn = errors.Join(warn, fmt.Errorf("restoring route_localnet=%d on %s: %w", v, name, err))
			continue
		}
		gone = append(gone, e)
	}
	tx.Batch().DeleteElements(set, gone)
	var add []nft.Element
	for _, name := range wanted {
		if have[name] {
			continue
		}
		have[name] = true
		cur, err := sysctls(ns).get(ns, localnetSysctl(name))
		if err != nil {
			return warn, fmt.Errorf("reading route_localnet of %s: %w", name, err)
		}
		v, err := strconv.ParseInt(cur, 10, 32)
		if err != nil {
			return warn, fmt.Errorf("reading route_localnet of %s: %q is not a number", name, cur)
		}
		add = append(add, nft.Element{Key: priorKey(name), Val: binaryutil.NativeEndian.PutUint32(uint32(int32(v))), Comment: priorComment})
	}
	tx.Batch().CreateElements(set, add)
	if len(wanted) > 0 {
		tx.AfterCommit(func() error {
			for _, name := range wanted {
				// Already on (the interface's other attachments
				// set it): nothing to write. The write is the
				// file, whose path costs more the more containers
				// the host has (readLocalnet).
				if v, err := sysctls(ns).get(ns, localnetSysctl(name)); err == nil && v == "1" {
					continue
				}
				if err := sysctls(ns).set(ns, localnetSysctl(name), "1"); err != nil {
					return &localnetError{err}
				}
			}
			return nil
		})
	}
	return warn, nil
}

// localnetError is a failure to set route_localnet after Setup's commit.
type localnetError struct{ err error }

func (e *localnetError) Error() string { return "unable to enable route_localnet: " + e.err.Error() }
func (e *localnetError) Unwrap() error { return e.err }

// usersAfter are the interfaces with a localnet record once the batch has
// turned cur into cur without what drop removes, plus want.
func usersAfter(cur, want []nft.Element, drop func(nft.Element) bool) map[string]bool {
	users := map[string]bool{}
	for _, e := range cur {
		if !drop(e) {
			users[recordIface(e)] = true
		}
	}
	for _, w := range want {
		users[recordIface(w)] = true
	}
	return users
}

// othersOn tells, for the interfaces of mine (an owner's localnet records,
// which match selects), whether a record that match does not select is
// left on them: users as usersAfter gives it, for those interfaces only
// (ifaces). Each is one partial read of set (nft.Tx.AnyElement).
func othersOn(tx *nft.Tx, set *nftables.Set, mine []nft.Element, match func(comment string) bool) (users map[string]bool, ifaces []string, err error) {
	users, ifaces = map[string]bool{}, []string{}
	for _, e := range mine {
		name := recordIface(e)
		if !match(e.Comment) || slices.Contains(ifaces, name) {
			continue
		}
		ifaces = append(ifaces, name)
		key := nft.IfnameKey(name)
		users[name], err = tx.AnyElement(set, func(o nft.Element) bool {
			return bytes.HasPrefix(o.Key, key) && !match(o.Comment)
		})
		if err != nil {
			return nil, nil, err
		}
	}
	return users, ifaces, nil
}

// checkLocalnet fails when an interface owner has a record for has
// route_localnet off.
func checkLocalnet(ns *netns.NS, records []nft.Element) error {
	for _, e := range records {
		name := recordIface(e)
		v, err := sysctls(ns).get(ns, localnetSysctl(name))
		if err != nil {
			return fmt.Errorf("reading route_localnet of %s: %w", name, err)
		}
		if v == "0" {
			return fmt.Errorf("route_localnet is off on %s: localhost clients cannot reach the container's host ports", name)
		}
	}
	return nil
}

func newLocalnetSets(t *nftables.Table) (records, prior *nftables.Set) {
	records = &nftables.Set{Table: t, Name: "localnet", Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName)}
	prior = &nftables.Set{Table: t, Name: "localnet_prior", IsMap: true,
		KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian, DataType: nftables.TypeMark}
	return records, prior
}
