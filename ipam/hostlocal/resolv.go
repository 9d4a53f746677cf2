package hostlocal

import (
	"bufio"
	"io"
	"os"
	"strings"

	"github.com/nftcni/nftcni/cni"
)

// parseResolvConf reads a resolv.conf-format file into the result's dns.
// The path comes from the admin's config and is
// opened normally (following symlinks), like the reference; errors keep the
// os texts ("open <path>: <reason>").
func parseResolvConf(path string) (cni.DNS, error) {
	f, err := os.Open(path)
	if err != nil {
		return cni.DNS{}, err
	}
	defer f.Close()
	return readResolvConf(f)
}

// readResolvConf uses bufio.Scanner's default 64 KiB line limit on purpose:
// a longer line fails with "bufio.Scanner: token too long", as in the
// reference.
func readResolvConf(r io.Reader) (cni.DNS, error) {
	var dns cni.DNS
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			dns.Nameservers = append(dns.Nameservers, fields[1])
		case "domain":
			dns.Domain = fields[1]
		case "search":
			dns.Search = append(dns.Search, fields[1:]...)
		case "options":
			dns.Options = append(dns.Options, fields[1:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return cni.DNS{}, err
	}
	return dns, nil
}
