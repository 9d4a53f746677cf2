package hostlocal

import (
	"encoding/json"
	"net"

	"github.com/nftcni/nftcni/cni"
)

// route mirrors the reference's wire struct for a route.
type route struct {
	Dst      ipNet  `json:"dst"`
	GW       net.IP `json:"gw,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	AdvMSS   int    `json:"advmss,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Table    *int   `json:"table,omitempty"`
	Scope    *int   `json:"scope,omitempty"`
}

// wireRoute decodes one ipam.routes entry into the result model, keeping
// every field (routes are copied verbatim to the result). As in the
// reference, an absent dst is allowed (printed "<nil>") but an empty or
// null one fails as an invalid CIDR.
type wireRoute struct{ r cni.Route }

func (w *wireRoute) UnmarshalJSON(data []byte) error {
	var rt route
	if err := json.Unmarshal(data, &rt); err != nil {
		return err
	}
	w.r = cni.Route{
		GW:       toAddr(rt.GW),
		MTU:      rt.MTU,
		AdvMSS:   rt.AdvMSS,
		Priority: rt.Priority,
		Table:    rt.Table,
		Scope:    rt.Scope,
	}
	if rt.Dst.set {
		w.r.Dst = rt.Dst.prefix()
	}
	return nil
}
