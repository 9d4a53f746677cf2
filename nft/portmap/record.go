package portmap

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// record is what the owner's marker keeps of s, for Teardown and a
// repeated Setup to look up its elements: one word per mapping
// ("<proto>:<host port>><target>[@<host IP>]"), hairpin prefix ("h<prefix>"),
// localhost address ("l<address>") and localnet interface ("n<name>"; a
// name has no spaces), and "m" for masqAll. Empty when s has conditions
// (its mappings are rules, which Teardown finds by reading the chain).
func record(s Spec) string {
	if len(s.Conditions4) > 0 || len(s.Conditions6) > 0 {
		return ""
	}
	var w []string
	for _, m := range s.Mappings {
		r := fmt.Sprintf("%d:%d>%s", m.Proto, m.HostPort, m.Target)
		if m.HostIP.IsValid() {
			r += "@" + m.HostIP.String()
		}
		w = append(w, r)
	}
	for _, p := range s.Hairpin {
		w = append(w, "h"+p.String())
	}
	for _, a := range s.Localhost {
		w = append(w, "l"+a.String())
	}
	for _, name := range s.Localnet {
		w = append(w, "n"+name)
	}
	if s.MasqAll {
		w = append(w, "m")
	}
	return strings.Join(w, " ")
}

// specOf reads a record back into the Spec of owner it was made from.
func specOf(owner ownerid.Owner, rec string) (Spec, error) {
	s := Spec{Owner: owner}
	for _, w := range strings.Fields(rec) {
		switch {
		case w == "m":
			s.MasqAll = true
		case strings.HasPrefix(w, "n"):
			s.Localnet = append(s.Localnet, w[1:])
		case strings.HasPrefix(w, "h"):
			p, err := netip.ParsePrefix(w[1:])
			if err != nil {
				return s, err
			}
			s.Hairpin = append(s.Hairpin, p)
		case strings.HasPrefix(w, "l"):
			a, err := netip.ParseAddr(w[1:])
			if err != nil {
				return s, err
			}
			s.Localhost = append(s.Localhost, a)
		default:
			m, err := mappingOf(w)
			if err != nil {
				return s, err
			}
			s.Mappings = append(s.Mappings, m)
		}
	}
	return s, nil
}

// mappingOf reads back a mapping's record word,
// "<proto>:<host port>><target>[@<host IP>]".
func mappingOf(w string) (Mapping, error) {
	var m Mapping
	head, tgt, ok := strings.Cut(w, ">")
	if !ok {
		return m, fmt.Errorf("malformed record word %q", w)
	}
	tgt, hostIP, at := strings.Cut(tgt, "@")
	if at {
		a, err := netip.ParseAddr(hostIP)
		if err != nil {
			return m, err
		}
		m.HostIP = a
	}
	t, err := netip.ParseAddrPort(tgt)
	if err != nil {
		return m, err
	}
	m.Target = t
	proto, port, ok := strings.Cut(head, ":")
	pr, err1 := strconv.ParseUint(proto, 10, 8)
	po, err2 := strconv.ParseUint(port, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return m, fmt.Errorf("malformed record word %q", w)
	}
	m.Proto, m.HostPort = uint8(pr), uint16(po)
	return m, nil
}

// recompute reads the record in owner's marker back as what the owner
// has, per set (see nft.Recorded).
func recompute(owner ownerid.Owner, rec string) (map[*nftables.Set][]nft.Element, error) {
	s, err := specOf(owner, rec)
	if err != nil {
		return nil, err
	}
	p, err := plan(s)
	if err != nil {
		return nil, err
	}
	return p.elems, nil
}
