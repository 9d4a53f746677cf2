package firewall

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
)

func dumpBatch(t *testing.T, name string, f *nfttest.Fake) {
	b := f.Only(t)
	var sb strings.Builder
	for i, m := range b[1 : len(b)-1] {
		fmt.Fprintf(&sb, "%d type=%#x flags=%#x", i, uint16(m.Header.Type)&0xff, uint16(m.Header.Flags))
		walk(&sb, m.Data[4:], 0)
		sb.WriteString("\n")
	}
	os.WriteFile("/tmp/dump_"+name+".txt", []byte(sb.String()), 0o644)
}

func walk(sb *strings.Builder, b []byte, depth int) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return
	}
	for ad.Next() {
		d := ad.Bytes()
		printable := len(d) > 1 && d[len(d)-1] == 0
		for _, c := range d[:max(len(d)-1, 0)] {
			if c < 32 || c > 126 {
				printable = false
			}
		}
		if printable {
			fmt.Fprintf(sb, " [%d:%d %q]", depth, ad.Type(), string(d[:len(d)-1]))
		} else if depth < 4 && len(d) >= 4 {
			fmt.Fprintf(sb, " [%d:%d {", depth, ad.Type())
			walk(sb, d, depth+1)
			fmt.Fprintf(sb, "} %x]", d[:min(len(d), 40)])
		} else {
			fmt.Fprintf(sb, " [%d:%d %x]", depth, ad.Type(), d)
		}
	}
}

var _ = nftables.TableFamilyINet

func TestZZDump(t *testing.T) {
	f := run(t, nfttest.State{Gen: 7}, func(ns *netns.NS) error { return Setup(ns, sampleAttachment) })
	dumpBatch(t, "fw_fresh", f)
	f = run(t, existing(), func(ns *netns.NS) error { return Setup(ns, sampleAttachment) })
	dumpBatch(t, "fw_again", f)
}
