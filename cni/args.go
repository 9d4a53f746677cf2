package cni

import (
	"fmt"
	"strings"
)

// ArgField is one CNI_ARGS key a plugin understands. Keys match
// case-sensitively, like the reference's struct-field lookup.
type ArgField struct {
	Name string
	// Set parses and stores the value; its error is reported as
	// `ARGS: error parsing value of pair "K=V": <err>`.
	Set func(value string) error
}

// LoadArgs parses CNI_ARGS strictly, exactly like the reference library:
// `K=V` pairs separated by `;`, every piece must have
// exactly one `=`, unknown keys fail unless IgnoreUnknown is true.
func LoadArgs(args string, fields ...ArgField) error {
	if args == "" {
		return nil
	}
	ignoreUnknown := false
	var unknown []string
	for _, pair := range strings.Split(args, ";") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			return fmt.Errorf("ARGS: invalid pair %q", pair)
		}
		key, val := kv[0], kv[1]
		var set func(string) error
		if key == "IgnoreUnknown" {
			set = func(v string) (err error) { ignoreUnknown, err = ParseBool(v); return err }
		} else {
			for _, f := range fields {
				if f.Name == key {
					set = f.Set
					break
				}
			}
		}
		if set == nil {
			unknown = append(unknown, pair)
			continue
		}
		if err := set(val); err != nil {
			return fmt.Errorf("ARGS: error parsing value of pair %q: %w", pair, err)
		}
	}
	if len(unknown) > 0 && !ignoreUnknown {
		return fmt.Errorf("ARGS: unknown args %q", unknown)
	}
	return nil
}

// ParseBool accepts 1/0/true/false in any case, as CNI_ARGS booleans do.
func ParseBool(v string) (bool, error) {
	switch s := strings.ToLower(v); s {
	case "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	default:
		return false, fmt.Errorf("boolean unmarshal error: invalid input %s", s)
	}
}

// ParseArgsLenient splits CNI_ARGS the way the dhcp plugin does: on `;`,
// then at the first `=`; pieces without `=` are dropped.
func ParseArgsLenient(args string) [][2]string {
	var out [][2]string
	for _, pair := range strings.Split(args, ";") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}
