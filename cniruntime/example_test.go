package cniruntime_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
)

// stand-in plugins: the examples run this test binary as their plugins.
// Started under a name beginning with "rec" it is the recording plugin of
// recorder_test.go: it answers ADD with a fixed result (an address per
// family on the interface it is given), passes a prevResult through, and
// answers every other command with success, unless its config says
// otherwise ("recFail"). It touches no namespace, so the examples need no
// privileges. A program of yours sets Runtime.Path to the directories of
// the real plugins instead (cniruntime.DefaultPath: CNI_PATH, or
// /opt/cni/bin).
func plugins() (bin, cache string, done func()) {
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cniruntime-example-")
	if err != nil {
		log.Fatal(err)
	}
	bin, cache = filepath.Join(dir, "bin"), filepath.Join(dir, "cache")
	if err := os.Mkdir(bin, 0o755); err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"rec-a", "rec-b"} {
		if err := os.Symlink(exe, filepath.Join(bin, name)); err != nil {
			log.Fatal(err)
		}
	}
	return bin, cache, func() { os.RemoveAll(dir) }
}

// A network config list, as a runtime reads it from /etc/cni/net.d: the
// plugins of the chain, in order, with the list's name and version.
func ExampleNetworkConfFromBytes() {
	list, err := cniruntime.NetworkConfFromBytes([]byte(`{
		"cniVersion": "1.1.0",
		"name": "podnet",
		"plugins": [
			{"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}},
			{"type": "portmap", "capabilities": {"portMappings": true}}
		]
	}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(list.Name, list.CNIVersion)
	for _, p := range list.Plugins {
		fmt.Println(p.Network.Type, p.Network.Capabilities)
	}
	// Output:
	// podnet 1.1.0
	// bridge map[]
	// portmap map[portMappings:true]
}

// Networks are found by name in a directory of .conflist (and .conf, .json)
// files, as libcni finds them.
func ExampleLoadNetworkConf() {
	dir, err := os.MkdirTemp("", "netd-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	conf := `{"cniVersion": "1.0.0", "name": "podnet", "plugins": [{"type": "ptp", "ipam": {"type": "static"}}]}`
	if err := os.WriteFile(filepath.Join(dir, "10-podnet.conflist"), []byte(conf), 0o644); err != nil {
		log.Fatal(err)
	}
	list, err := cniruntime.LoadNetworkConf(dir, "podnet")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(list.Name, filepath.Base(list.File), list.Plugins[0].Network.Type)

	_, err = cniruntime.LoadNetworkConf(dir, "other")
	var nf cniruntime.NotFoundError
	fmt.Println(errors.As(err, &nf))
	// Output:
	// podnet 10-podnet.conflist ptp
	// true
}

// One attachment's life: ADD runs the chain and caches its result, CHECK
// and the cached result go by that cache, DEL runs the chain backwards and
// forgets the attachment.
func ExampleRuntime_AddNetworkList() {
	bin, cache, done := plugins()
	defer done()
	list, err := cniruntime.NetworkConfFromBytes([]byte(`{
		"cniVersion": "1.1.0", "name": "podnet",
		"plugins": [{"type": "rec-a"}, {"type": "rec-b"}]
	}`))
	if err != nil {
		log.Fatal(err)
	}
	r := &cniruntime.Runtime{Path: []string{bin}, CacheDir: cache}
	att := &cniruntime.RuntimeConf{ContainerID: "c1", NetNS: "/run/netns/c1", IfName: "eth0"}
	ctx := context.Background()

	res, err := r.AddNetworkList(ctx, list, att)
	if err != nil {
		log.Fatal(err)
	}
	for _, ip := range res.IPs {
		fmt.Println(res.Interfaces[*ip.Interface].Name, ip.Address)
	}
	fmt.Println("CHECK:", r.CheckNetworkList(ctx, list, att))
	cached, err := r.GetNetworkListCachedResult(list, att)
	fmt.Println("cached:", cached.IPs[0].Address, err)

	fmt.Println("DEL:", r.DelNetworkList(ctx, list, att))
	cached, err = r.GetNetworkListCachedResult(list, att)
	fmt.Println("cached:", cached, err)
	// Output:
	// eth0 10.1.2.3/24
	// eth0 fd00:1::3/64
	// CHECK: <nil>
	// cached: 10.1.2.3/24 <nil>
	// DEL: <nil>
	// cached: <nil> <nil>
}

// GC deletes every cached attachment of the network that the runtime does
// not name as valid (a full DEL each), then lets each plugin release what
// else it holds for attachments that are gone.
func ExampleRuntime_GCNetworkList() {
	bin, cache, done := plugins()
	defer done()
	list, err := cniruntime.NetworkConfFromBytes([]byte(`{"cniVersion": "1.1.0", "name": "podnet", "plugins": [{"type": "rec-a"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	r := &cniruntime.Runtime{Path: []string{bin}, CacheDir: cache}
	ctx := context.Background()
	for _, id := range []string{"c1", "c2", "c3"} {
		if _, err := r.AddNetworkList(ctx, list, &cniruntime.RuntimeConf{ContainerID: id, NetNS: "/run/netns/" + id, IfName: "eth0"}); err != nil {
			log.Fatal(err)
		}
	}
	// c2 is gone: the runtime no longer knows it.
	err = r.GCNetworkList(ctx, list, &cniruntime.GCArgs{ValidAttachments: []cni.Attachment{
		{ContainerID: "c1", IfName: "eth0"}, {ContainerID: "c3", IfName: "eth0"},
	}})
	fmt.Println("GC:", err)
	atts, err := r.GetCachedAttachments("")
	if err != nil {
		log.Fatal(err)
	}
	var left []string
	for _, a := range atts {
		left = append(left, a.ContainerID)
	}
	slices.Sort(left)
	fmt.Println("cached:", left)
	// Output:
	// GC: <nil>
	// cached: [c1 c3]
}

// STATUS asks each plugin whether it can serve an ADD now; the first that
// cannot answers with code 50 (unavailable) or 51 (unavailable, and its
// attachments may be broken).
func ExampleRuntime_GetStatusNetworkList() {
	bin, cache, done := plugins()
	defer done()
	r := &cniruntime.Runtime{Path: []string{bin}, CacheDir: cache}
	list, err := cniruntime.NetworkConfFromBytes([]byte(`{"cniVersion": "1.1.0", "name": "podnet", "plugins": [
		{"type": "rec-a"},
		{"type": "rec-b", "recFail": {"STATUS": {"stdout": "{\"cniVersion\":\"1.1.0\",\"code\":50,\"msg\":\"its daemon is not running\"}"}}}
	]}`))
	if err != nil {
		log.Fatal(err)
	}
	err = r.GetStatusNetworkList(context.Background(), list)
	var e *cni.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, e.Msg)
	}
	// Output:
	// 50 its daemon is not running
}

// Before a network is used: every plugin is installed and speaks the
// list's version; the answer is the capabilities the runtime should pass.
func ExampleRuntime_ValidateNetworkList() {
	bin, cache, done := plugins()
	defer done()
	r := &cniruntime.Runtime{Path: []string{bin}, CacheDir: cache}
	list, err := cniruntime.NetworkConfFromBytes([]byte(`{"cniVersion": "1.0.0", "name": "podnet", "plugins": [
		{"type": "rec-a"},
		{"type": "rec-b", "capabilities": {"portMappings": true, "bandwidth": false}}
	]}`))
	if err != nil {
		log.Fatal(err)
	}
	caps, err := r.ValidateNetworkList(context.Background(), list)
	fmt.Println(caps, err)

	list.Plugins[0].Network.Type = "missing"
	_, err = r.ValidateNetworkList(context.Background(), list)
	fmt.Println(err != nil)
	// Output:
	// [portMappings] <nil>
	// true
}
