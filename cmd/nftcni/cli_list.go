package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

// listedAttachment is one row of `nftcni list`; its JSON is `-o json`'s.
type listedAttachment struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerId"`
	IfName      string `json:"ifName"`
	NetNS       string `json:"netns"`
	// NetNSState is netns.Probe's answer: alive, gone or unknown.
	NetNSState string `json:"netnsState"`
	// Cached: the runtime's result cache holds the attachment; Recorded:
	// our ADD's record does (package attachrec).
	Cached    bool             `json:"cached"`
	Recorded  bool             `json:"recorded"`
	Addresses []string         `json:"addresses"`
	HostPorts []listedHostPort `json:"hostPorts"`
	Drift     listedDrift      `json:"drift"`
	att       *cniruntime.NetworkAttachment
	list      *cniruntime.NetworkConfigList
	probe     netns.State
}

type listedHostPort struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// listedDrift is what CHECK says of the attachment. State is one of
// "ok" (CHECK passed), "drift" (CHECK failed; Message is its error),
// "stale" (the namespace is gone: gc --all collects it) and "unchecked"
// (Message says why).
type listedDrift struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

// cmdList is `nftcni list`: every attachment on the host, across
// networks — those in the runtime's result cache and those only our ADD
// records know (an ADD running, or one that failed without DEL) — with
// what CHECK says of each (docs/cli.md, "list").
func cmdList(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	common := addCommonFlags(fs)
	output := fs.String("o", "table", "output format: table or json")
	drift := fs.String("drift", "check", "how the drift column is found: check (CHECK of the chain, this binary's plugins in-process), exec (every plugin exec'd, as a runtime's CHECK), off")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nftcni list [-o table|json] [-drift check|exec|off] [-cache-dir DIR] [-host-netns PATH]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		if err == nil {
			fs.Usage()
		}
		return errUsage
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(fs.Output(), "nftcni list: -o %q: want table or json\n", *output)
		return errUsage
	}
	switch *drift {
	case "check", "exec", "off":
	default:
		fmt.Fprintf(fs.Output(), "nftcni list: -drift %q: want check, exec or off\n", *drift)
		return errUsage
	}
	env, err := loadEnv(common)
	if err != nil {
		return err
	}
	if *drift == "check" {
		env.runtime.InProcess = true
		// Every CHECK reads the same chains and sets; while nothing is
		// committed the kernel's answer is the same (nft.EnableReadCache).
		nft.EnableReadCache()
	}
	rows, err := listAttachments(env)
	if err != nil {
		return err
	}
	if *drift != "off" {
		ctx := context.Background()
		for _, r := range rows {
			r.Drift = checkDrift(ctx, env, r)
		}
	} else {
		for _, r := range rows {
			r.Drift = listedDrift{State: "unchecked", Message: "-drift off"}
		}
	}
	if *output == "json" {
		if rows == nil {
			rows = []*listedAttachment{}
		}
		b, err := json.MarshalIndent(rows, "", "    ")
		if err != nil {
			return err
		}
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	return printTable(stdout, rows)
}

// listAttachments reads the cache and the records, probes each namespace
// and loads each network's current configuration.
func listAttachments(env *rtEnv) ([]*listedAttachment, error) {
	probed, err := env.runtime.ProbeCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("reading the result cache: %w", err)
	}
	recs, err := attachrec.List(attachrec.Dir(os.Getenv), "")
	if err != nil {
		return nil, fmt.Errorf("reading the attachment records: %w", err)
	}
	dir, err := cniruntime.LoadDirectory(env.confDir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", env.confDir, err)
	}
	lists := map[string]*cniruntime.NetworkConfigList{}
	for _, l := range dir.Networks {
		lists[l.Name] = l
	}
	byKey := map[[3]string]*listedAttachment{}
	var rows []*listedAttachment
	for _, p := range probed {
		r := &listedAttachment{
			Network: p.Network, ContainerID: p.ContainerID, IfName: p.IfName, NetNS: p.NetNS,
			NetNSState: p.NetNSState.String(), probe: p.NetNSState, Cached: true,
			att: p.NetworkAttachment, list: lists[p.Network],
			Addresses: []string{}, HostPorts: hostPorts(p.CapabilityArgs),
		}
		if res, err := p.DecodedResult(); err == nil && res != nil {
			for _, ip := range res.IPs {
				r.Addresses = append(r.Addresses, ip.Address.String())
			}
		}
		byKey[[3]string{r.Network, r.ContainerID, r.IfName}] = r
		rows = append(rows, r)
	}
	for _, rec := range recs {
		if r := byKey[[3]string{rec.Network, rec.ContainerID, rec.IfName}]; r != nil {
			r.Recorded = true
			continue
		}
		st, _ := netns.Probe(rec.NetNS)
		rows = append(rows, &listedAttachment{
			Network: rec.Network, ContainerID: rec.ContainerID, IfName: rec.IfName, NetNS: rec.NetNS,
			NetNSState: st.String(), probe: st, Recorded: true, list: lists[rec.Network],
			Addresses: []string{}, HostPorts: []listedHostPort{},
		})
	}
	slices.SortStableFunc(rows, func(a, b *listedAttachment) int {
		return cmp.Or(cmp.Compare(a.Network, b.Network), cmp.Compare(a.ContainerID, b.ContainerID), cmp.Compare(a.IfName, b.IfName))
	})
	return rows, nil
}

// hostPorts reads the portMappings capability argument the runtime
// passed (and the cache kept).
func hostPorts(capArgs map[string]interface{}) []listedHostPort {
	out := []listedHostPort{}
	raw, ok := capArgs["portMappings"]
	if !ok {
		return out
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return out
	}
	_ = json.Unmarshal(b, &out)
	for i := range out {
		if out[i].Protocol == "" {
			out[i].Protocol = "tcp"
		}
	}
	return out
}

// checkDrift runs the network's CHECK for r, as the runtime would (the
// current configuration, the cached result as prevResult, the cached
// arguments), unless it cannot say anything.
func checkDrift(ctx context.Context, env *rtEnv, r *listedAttachment) listedDrift {
	switch {
	case r.probe == netns.Gone:
		return listedDrift{State: "stale", Message: "network namespace gone: `nftcni gc --all` collects it"}
	case !r.Cached:
		return listedDrift{State: "unchecked", Message: "not cached: its ADD is running, or failed and was not deleted"}
	case r.list == nil:
		return listedDrift{State: "unchecked", Message: fmt.Sprintf("network not in %s", env.confDir)}
	case r.list.DisableCheck:
		return listedDrift{State: "unchecked", Message: "disableCheck is set"}
	}
	if ok, _ := cni.GreaterThanOrEqual(r.list.CNIVersion, "0.4.0"); !ok {
		return listedDrift{State: "unchecked", Message: fmt.Sprintf("cniVersion %q has no CHECK", r.list.CNIVersion)}
	}
	rt := &cniruntime.RuntimeConf{
		ContainerID: r.ContainerID, NetNS: r.NetNS, IfName: r.IfName,
		Args: r.att.CniArgs, CapabilityArgs: r.att.CapabilityArgs,
	}
	err := env.runtime.CheckNetworkList(ctx, r.list, rt)
	if err == nil {
		return listedDrift{State: "ok"}
	}
	var ce *cni.Error
	if errors.As(err, &ce) && ce.Details != "" {
		return listedDrift{State: "drift", Message: ce.Msg + ": " + ce.Details}
	}
	return listedDrift{State: "drift", Message: err.Error()}
}

func printTable(w io.Writer, rows []*listedAttachment) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NETWORK\tCONTAINER\tIF\tNETNS\tADDRESSES\tHOST PORTS\tDRIFT")
	for _, r := range rows {
		id := r.ContainerID
		if len(id) > 28 { // a cnitool ID whole; a runtime's 64 hex digits cut (-o json has them)
			id = id[:28]
		}
		ns := r.NetNS
		if r.probe != netns.Alive {
			ns += " (" + r.NetNSState + ")"
		}
		var ports []string
		for _, p := range r.HostPorts {
			s := fmt.Sprintf("%d->%d/%s", p.HostPort, p.ContainerPort, p.Protocol)
			if p.HostIP != "" {
				s = p.HostIP + ":" + s
			}
			ports = append(ports, s)
		}
		drift := r.Drift.State
		if r.Drift.Message != "" {
			drift += ": " + r.Drift.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Network, id, r.IfName, ns,
			orDash(strings.Join(r.Addresses, ",")), orDash(strings.Join(ports, ",")), drift)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
