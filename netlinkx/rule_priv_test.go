package netlinkx_test

import (
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netlinkx"
)

// TestRules adds, lists and deletes policy routing rules in a throwaway
// namespace, and reads the kernel's default rules.
func TestRules(t *testing.T) {
	_, h := newNS(t)
	list := func() []string {
		rules, err := h.Rules(0)
		must(t, err)
		var out []string
		for _, r := range rules {
			out = append(out, r.String())
		}
		return out
	}
	defaults := []string{"from all lookup 255", "32766: from all lookup 254", "32767: from all lookup 253",
		"from all lookup 255", "32766: from all lookup 254"}
	if got := list(); !slices.Equal(got, defaults) {
		t.Fatalf("default rules %q", got)
	}

	v4 := netlinkx.Rule{Src: netip.MustParsePrefix("10.1.0.5/32"), Table: 100}
	v6 := netlinkx.Rule{Src: netip.MustParsePrefix("fd00::5/128"), Table: 1000, Priority: 200}
	must(t, h.AddRule(v4))
	must(t, h.AddRule(v6))
	// An explicit priority makes the rule's key: the same again is EEXIST.
	wantErr(t, h.AddRule(v6), "adding rule 200: from fd00::5/128 lookup 1000: file exists", unix.EEXIST)
	rules, err := h.Rules(unix.AF_INET6)
	must(t, err)
	i := slices.IndexFunc(rules, func(r netlinkx.Rule) bool { return r.Src.IsValid() })
	if i < 0 || rules[i].Table != 1000 || rules[i].Priority != 200 || !rules[i].Lookup() || rules[i].OtherSelectors {
		t.Errorf("IPv6 rules %+v", rules)
	}
	rules, err = h.Rules(unix.AF_INET)
	must(t, err)
	// Without a priority the kernel puts it just before main's rule.
	if i := slices.IndexFunc(rules, func(r netlinkx.Rule) bool { return r.Src == v4.Src }); i < 0 || rules[i].Priority != 32765 || rules[i].Table != 100 {
		t.Errorf("IPv4 rules %+v", rules)
	}

	must(t, h.DelRule(v4))
	must(t, h.DelRule(netlinkx.Rule{Src: v6.Src})) // table and priority: any
	wantErr(t, h.DelRule(v4), "deleting rule from 10.1.0.5/32 lookup 100: no such file or directory", unix.ENOENT)
	if got := list(); !slices.Equal(got, defaults) {
		t.Errorf("rules after deleting ours %q", got)
	}

	// A rule with another selector is marked as such.
	must(t, h.AddRule(netlinkx.Rule{Family: unix.AF_INET, Table: 7, Priority: 10}))
	rules, err = h.Rules(unix.AF_INET)
	must(t, err)
	if i := slices.IndexFunc(rules, func(r netlinkx.Rule) bool { return r.Table == 7 }); i < 0 || rules[i].Src.IsValid() || rules[i].OtherSelectors {
		t.Errorf("from-all rule %+v", rules)
	}
	if err := h.AddRule(netlinkx.Rule{Family: unix.AF_INET6, Src: netip.MustParsePrefix("10.0.0.0/8")}); err == nil {
		t.Error("rule with a source of another family accepted")
	}
}
