package cniruntime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// cacheVersions are the list versions the cache readers convert to.
var cacheVersions = []string{"0.2.0", "0.4.0", "1.0.0", "1.1.0"}

// FuzzCache puts any bytes in an attachment's result-cache file (the
// libcni format, or an older bare result) and reads it with every reader:
// the cached result, the cached config and the attachment listing. Never
// a panic; a cached result comes back in the list's version and prints in
// it; the cached config keeps the attachment's identity; a listed
// attachment is complete and, when filtered, the container's.
func FuzzCache(f *testing.F) {
	for _, s := range []string{
		`{"kind":"cniCacheV1","containerId":"c1","config":"eyJjbmlWZXJzaW9uIjoiMS4wLjAiLCJuYW1lIjoibmV0In0=","ifName":"eth0","networkName":"net","netns":"/run/netns/x","cniArgs":[["K","V"]],"capabilityArgs":{"portMappings":[{"hostPort":80}]},"result":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}}`,
		`{"kind":"cniCacheV1","containerId":"c1","ifName":"eth0","networkName":"net","result":{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24"}}}`,
		`{"kind":"cniCacheV1","containerId":"c2","ifName":"","networkName":"net","result":null}`,
		`{"kind":"cniCacheV1","containerId":"c1","ifName":"eth0","networkName":"net","result":{"cniVersion":"1.1.0"}}`,
		`{"kind":"other","result":{}}`,
		`{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}`,
		`{"ip4":{"ip":"10.0.0.2/24"}}`,
		`{"kind":"cniCacheV1","config":"!!"}`, `null`, `[]`, ``, `{`,
	} {
		for i := range cacheVersions {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, vi uint8) {
		version := cacheVersions[int(vi)%len(cacheVersions)]
		r := &Runtime{CacheDir: t.TempDir()}
		dir := filepath.Join(r.CacheDir, "results")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "net-c1-eth0"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		list := &NetworkConfigList{Name: "net", CNIVersion: version}
		rt := &RuntimeConf{ContainerID: "c1", IfName: "eth0", NetNS: "/run/netns/x"}

		if res, err := r.GetNetworkListCachedResult(list, rt); err == nil && res != nil {
			if res.CNIVersion != version {
				t.Fatalf("cached result in %q, list is %q", res.CNIVersion, version)
			}
			if _, err := cni.Encode(res, version); err != nil {
				t.Fatalf("cached result does not print as %s: %v", version, err)
			}
		}
		if conf, rt2, err := r.GetNetworkListCachedConfig(list, rt); err == nil && conf != nil {
			if rt2 == nil || rt2.ContainerID != rt.ContainerID || rt2.IfName != rt.IfName || rt2.NetNS != rt.NetNS {
				t.Fatalf("cached config changed the attachment: %+v", rt2)
			}
		}
		for _, id := range []string{"", "c1"} {
			atts, err := r.GetCachedAttachments(id)
			if err != nil {
				t.Fatalf("listing: %v", err)
			}
			for _, a := range atts {
				if a.IfName == "" || a.Network == "" || (id != "" && a.ContainerID != id) {
					t.Fatalf("listed %+v for %q", a, id)
				}
			}
		}
	})
}
