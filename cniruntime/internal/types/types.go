// Package types holds the plugin-config shape the runtime decodes every
// plugin object into while loading a network. It mirrors the upstream
// library's types.PluginConf field for field, and its package and type names
// match too, because encoding/json names them in decode errors ("cannot
// unmarshal string into Go struct field PluginConf.ipam of type types.IPAM"):
// a user comparing our load errors with libcni's sees the same text.
package types

// PluginConf is the part of a plugin object the runtime reads: its type, its
// name (for error messages) and its capabilities. The other fields exist so
// that a malformed value fails to load exactly as it does in libcni.
type PluginConf struct {
	CNIVersion string `json:"cniVersion,omitempty"`

	Name         string          `json:"name,omitempty"`
	Type         string          `json:"type,omitempty"`
	Capabilities map[string]bool `json:"capabilities,omitempty"`
	IPAM         IPAM            `json:"ipam,omitempty"`
	DNS          DNS             `json:"dns,omitempty"`

	RawPrevResult map[string]interface{} `json:"prevResult,omitempty"`

	ValidAttachments []GCAttachment `json:"cni.dev/valid-attachments,omitempty"`
}

// IPAM is the "ipam" object as far as the runtime cares: its type.
type IPAM struct {
	Type string `json:"type,omitempty"`
}

// DNS is the "dns" object of a plugin config.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// GCAttachment is one item of the GC valid-attachments list.
type GCAttachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}
