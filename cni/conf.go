package cni

import (
	"encoding/json"
	"fmt"
)

// NetConf holds the keys every plugin's config shares. Plugins embed it in
// their own config struct; encoding/json then matches keys
// case-insensitively, like the reference.
type NetConf struct {
	CNIVersion   string          `json:"cniVersion,omitempty"`
	Name         string          `json:"name,omitempty"`
	Type         string          `json:"type,omitempty"`
	Capabilities map[string]bool `json:"capabilities,omitempty"`
	IPAM         IPAMConf        `json:"ipam,omitempty"`
	DNS          DNSConf         `json:"dns,omitempty"`

	RawPrevResult json.RawMessage `json:"prevResult,omitempty"`

	// GC input: nil when the key is absent, non-nil (maybe empty) when the
	// runtime sent a list.
	ValidAttachments *[]Attachment `json:"cni.dev/valid-attachments,omitempty"`
	OldAttachments   *[]Attachment `json:"cni.dev/attachments,omitempty"`
}

// IPAMConf is the part of "ipam" the parent plugin reads: the delegate's type.
type IPAMConf struct {
	Type string `json:"type,omitempty"`
}

// DNSConf is the "dns" config object (same keys as the result's dns).
type DNSConf struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// DNS converts the config object to the result model.
func (d DNSConf) DNS() DNS {
	return DNS(d)
}

// Attachment is one item of the GC valid-attachments list.
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// Attachments returns the GC list (cni.dev/valid-attachments, falling back
// to the older cni.dev/attachments) and whether the runtime sent one at all.
func (c *NetConf) Attachments() ([]Attachment, bool) {
	if c.ValidAttachments != nil {
		return *c.ValidAttachments, true
	}
	if c.OldAttachments != nil {
		return *c.OldAttachments, true
	}
	return nil, false
}

// PrevResult parses the config's prevResult (nil when absent).
func (c *NetConf) PrevResult() (*Result, error) {
	return ParsePrevResult(c.RawPrevResult, c.CNIVersion)
}

// DecodeNetConf decodes the common keys; decode failures are prefixed with
// the plugin's own wording (e.g. "failed to load netconf").
func DecodeNetConf(data []byte, prefix string) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return &c, nil
}
