package cniruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime/internal/types"
)

// DefaultConfDir is where runtimes look for network configurations unless
// told otherwise (NETCONFPATH for cnitool and our CLI).
const DefaultConfDir = "/etc/cni/net.d"

// PluginConf is the decoded view of one plugin object: type, name,
// capabilities and the other keys every plugin shares. It has the upstream
// library's shape so malformed values are refused with the same errors.
type PluginConf = types.PluginConf

// PluginConfig is one plugin of a network: its decoded common keys and the
// exact bytes its stdin is built from.
type PluginConfig struct {
	Network *PluginConf
	// Bytes is the plugin object as compact JSON with sorted keys (it went
	// through a generic-object round trip at load time, as in libcni).
	Bytes []byte
}

// NetworkConfigList is a loaded network: a conflist, or a single-plugin
// .conf/.json file wrapped into a one-element list.
type NetworkConfigList struct {
	Name string
	// CNIVersion is the negotiated version injected into
	// every plugin's stdin.
	CNIVersion             string
	DisableCheck           bool
	DisableGC              bool
	LoadOnlyInlinedPlugins bool
	Plugins                []*PluginConfig
	// Bytes is what the result cache stores as "config": the file as read
	// for a conflist, the generated wrapper list for a single-plugin file.
	Bytes []byte
	// File is the file the network was loaded from ("" when built from
	// bytes), for messages about its contents.
	File string
}

// NotFoundError says no configuration in Dir defines the network Name. The
// text is libcni's, since runtimes and scripts match on it, followed by the
// files skipped because they could not be parsed (a network defined in one
// of them would have been missed).
type NotFoundError struct {
	Dir  string
	Name string
	// Skipped holds one error per unparsable file whose network name could
	// not be read or was another one; each error names its file.
	Skipped []error
}

func (e NotFoundError) Error() string {
	msg := fmt.Sprintf(`no net configuration with name "%s" in %s`, e.Name, e.Dir)
	if len(e.Skipped) > 0 {
		msg += " (" + skippedText(e.Skipped) + ")"
	}
	return msg
}

// skippedText lists skipped files' errors in one line.
func skippedText(errs []error) string {
	texts := make([]string, len(errs))
	for i, err := range errs {
		texts[i] = err.Error()
	}
	return "skipped, not parsable: " + strings.Join(texts, "; ")
}

// NoConfigsFoundError says Dir holds no configuration file at all (or does
// not exist).
type NoConfigsFoundError struct {
	Dir string
}

func (e NoConfigsFoundError) Error() string {
	return fmt.Sprintf(`no net configurations found in %s`, e.Dir)
}

// NetworkPluginConfFromBytes decodes one plugin object. A missing "type" is
// an error because without it there is no binary to run.
func NetworkPluginConfFromBytes(pluginConfBytes []byte) (*PluginConfig, error) {
	conf := &PluginConfig{Bytes: pluginConfBytes, Network: &PluginConf{}}
	if err := json.Unmarshal(pluginConfBytes, conf.Network); err != nil {
		return nil, fmt.Errorf("error parsing configuration: %w", err)
	}
	if conf.Network.Type == "" {
		return nil, fmt.Errorf("error parsing configuration: missing 'type'")
	}
	return conf, nil
}

// NetworkPluginConfsFromFiles loads the extra plugin objects libcni appends
// to a conflist that does not set loadOnlyInlinedPlugins: every *.conf file
// in <dir>/<networkName>/. A missing directory means none.
func NetworkPluginConfsFromFiles(networkConfPath, networkName string) ([]*PluginConfig, error) {
	var pConfs []*PluginConfig
	pluginConfPath := filepath.Join(networkConfPath, networkName)
	pluginConfFiles, err := ConfFiles(pluginConfPath, []string{".conf"})
	if err != nil {
		return nil, fmt.Errorf("failed to read plugin config files in %s: %w", pluginConfPath, err)
	}
	for _, pluginConfFile := range pluginConfFiles {
		pluginConfBytes, err := os.ReadFile(pluginConfFile)
		if err != nil {
			return nil, fmt.Errorf("error reading %s: %w", pluginConfFile, err)
		}
		pluginConf, err := NetworkPluginConfFromBytes(pluginConfBytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pluginConfFile, err)
		}
		pConfs = append(pConfs, pluginConf)
	}
	return pConfs, nil
}

// NetworkConfFromBytes parses a conflist, negotiating the version from
// cniVersion and cniVersions. A list without "plugins" is
// accepted here (its plugins may come from a directory); the file loader
// refuses it when it ends up empty.
func NetworkConfFromBytes(confBytes []byte) (*NetworkConfigList, error) {
	rawList := make(map[string]interface{})
	if err := json.Unmarshal(confBytes, &rawList); err != nil {
		return nil, fmt.Errorf("error parsing configuration list: %w", err)
	}

	rawName, ok := rawList["name"]
	if !ok {
		return nil, fmt.Errorf("error parsing configuration list: no name")
	}
	name, ok := rawName.(string)
	if !ok {
		return nil, fmt.Errorf("error parsing configuration list: invalid name type %T", rawName)
	}

	var cniVersion string
	if rawVersion, ok := rawList["cniVersion"]; ok {
		cniVersion, ok = rawVersion.(string)
		if !ok {
			return nil, fmt.Errorf("error parsing configuration list: invalid cniVersion type %T", rawVersion)
		}
	}

	if rawVersions, ok := rawList["cniVersions"]; ok {
		rvs, ok := rawVersions.([]interface{})
		if !ok {
			// libcni prints the type of the failed assertion's result,
			// which is always []interface {}; kept for identical text.
			return nil, fmt.Errorf("error parsing configuration list: invalid type for cniVersions: %T", rvs)
		}
		vs := make([]string, 0, len(rvs))
		for i, rv := range rvs {
			v, ok := rv.(string)
			if !ok {
				return nil, fmt.Errorf("error parsing configuration list: invalid type for cniVersions index %d: %T", i, rv)
			}
			gt, err := greaterThan(v, cni.CurrentVersion)
			if err != nil {
				return nil, fmt.Errorf("error parsing configuration list: invalid cniVersions entry %s at index %d: %w", v, i, err)
			} else if !gt {
				// Versions newer than what we speak are skipped, so a
				// config can list future versions for future runtimes.
				vs = append(vs, v)
			}
		}
		if cniVersion != "" {
			gt, err := greaterThan(cniVersion, cni.CurrentVersion)
			if err != nil {
				return nil, fmt.Errorf("error parsing configuration list: invalid cniVersion %s: %w", cniVersion, err)
			} else if !gt {
				vs = append(vs, cniVersion)
			}
		}
		// The same comparator and sort as libcni, so that numerically equal
		// spellings ("1.1" and "1.1.0") end up in the same order.
		slices.SortFunc(vs, func(v1, v2 string) int {
			if v1 == v2 {
				return 0
			}
			if gt, _ := greaterThan(v1, v2); gt {
				return 1
			}
			return -1
		})
		if len(vs) > 0 {
			cniVersion = vs[len(vs)-1]
		}
	}

	readBool := func(key string) (bool, error) {
		rawVal, ok := rawList[key]
		if !ok {
			return false, nil
		}
		if b, ok := rawVal.(bool); ok {
			return b, nil
		}
		s, ok := rawVal.(string)
		if !ok {
			return false, fmt.Errorf("error parsing configuration list: invalid type %T for %s", rawVal, key)
		}
		s = strings.ToLower(s)
		switch s {
		case "false":
			return false, nil
		case "true":
			return true, nil
		}
		return false, fmt.Errorf("error parsing configuration list: invalid value %q for %s", s, key)
	}
	disableCheck, err := readBool("disableCheck")
	if err != nil {
		return nil, err
	}
	disableGC, err := readBool("disableGC")
	if err != nil {
		return nil, err
	}
	loadOnlyInlinedPlugins, err := readBool("loadOnlyInlinedPlugins")
	if err != nil {
		return nil, err
	}

	list := &NetworkConfigList{
		Name:                   name,
		DisableCheck:           disableCheck,
		DisableGC:              disableGC,
		LoadOnlyInlinedPlugins: loadOnlyInlinedPlugins,
		CNIVersion:             cniVersion,
		Bytes:                  confBytes,
	}

	plug, ok := rawList["plugins"]
	if !ok && loadOnlyInlinedPlugins {
		return nil, fmt.Errorf("error parsing configuration list: `loadOnlyInlinedPlugins` is true, and no 'plugins' key")
	} else if !ok {
		return list, nil
	}
	plugins, ok := plug.([]interface{})
	if !ok {
		return nil, fmt.Errorf("error parsing configuration list: invalid 'plugins' type %T", plug)
	}
	if len(plugins) == 0 {
		return nil, fmt.Errorf("error parsing configuration list: no plugins in list")
	}
	for i, conf := range plugins {
		newBytes, err := json.Marshal(conf)
		if err != nil {
			return nil, fmt.Errorf("failed to marshal plugin config %d: %w", i, err)
		}
		netConf, err := NetworkPluginConfFromBytes(newBytes)
		if err != nil {
			return nil, fmt.Errorf("failed to parse plugin config %d: %w", i, err)
		}
		list.Plugins = append(list.Plugins, netConf)
	}
	return list, nil
}

// NetworkConfFromFile loads a conflist file, adding the plugins found in
// <dir>/<name>/*.conf unless the list sets loadOnlyInlinedPlugins. Every
// error names the file it is about.
func NetworkConfFromFile(filename string) (*NetworkConfigList, error) {
	bytes, err := os.ReadFile(filename)
	if err != nil {
		return nil, fmt.Errorf("error reading %s: %w", filename, err)
	}
	conf, err := NetworkConfFromBytes(bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	if !conf.LoadOnlyInlinedPlugins {
		plugins, err := NetworkPluginConfsFromFiles(filepath.Dir(filename), conf.Name)
		if err != nil {
			return nil, err
		}
		conf.Plugins = append(conf.Plugins, plugins...)
	}
	if len(conf.Plugins) == 0 {
		return nil, fmt.Errorf("%s: no plugin configs found", filename)
	}
	conf.File = filename
	return conf, nil
}

// ConfFiles lists the regular entries of dir whose extension is one of
// extensions, in directory order. A missing directory is not an error: it
// simply holds no configuration.
func ConfFiles(dir string, extensions []string) ([]string, error) {
	files, err := os.ReadDir(dir)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	default:
		return nil, err
	}
	confFiles := []string{}
	for _, f := range files {
		if f.IsDir() {
			continue
		}
		fileExt := filepath.Ext(f.Name())
		for _, ext := range extensions {
			if fileExt == ext {
				confFiles = append(confFiles, filepath.Join(dir, f.Name()))
			}
		}
	}
	return confFiles, nil
}

// declaredName reads the network name a file declares, for a file that
// failed to load: ok is false when even that cannot be read.
func declaredName(file string) (name string, ok bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", false
	}
	var obj struct {
		Name *string `json:"name"`
	}
	if json.Unmarshal(data, &obj) != nil || obj.Name == nil {
		return "", false
	}
	return *obj.Name, true
}

// skipBroken decides about a file that failed to load while looking for
// network name: it is skipped (added to skipped) unless it declares that
// very network, in which case its error is the answer. A broken file thus
// never hides or breaks another network, and is still reported.
func skipBroken(file, name string, err error, skipped *[]error) error {
	if n, ok := declaredName(file); ok && n == name {
		return err
	}
	*skipped = append(*skipped, err)
	return nil
}

// loadConf finds a single-plugin file (.conf or .json) defining name,
// skipping the unparsable files of other (or unknown) networks.
func loadConf(dir, name string, skipped *[]error) (*PluginConfig, string, error) {
	files, err := ConfFiles(dir, []string{".conf", ".json"})
	switch {
	case err != nil:
		return nil, "", err
	case len(files) == 0:
		return nil, "", NoConfigsFoundError{Dir: dir}
	}
	sort.Strings(files)
	for _, confFile := range files {
		bytes, err := os.ReadFile(confFile)
		if err != nil {
			return nil, "", fmt.Errorf("error reading %s: %w", confFile, err)
		}
		conf, err := NetworkPluginConfFromBytes(bytes)
		if err != nil {
			if err := skipBroken(confFile, name, fmt.Errorf("%s: %w", confFile, err), skipped); err != nil {
				return nil, "", err
			}
			continue
		}
		if conf.Network.Name == name {
			return conf, confFile, nil
		}
	}
	return nil, "", NotFoundError{Dir: dir, Name: name, Skipped: *skipped}
}

// LoadNetworkConf loads network name from dir with libcni's selection rules:
// every *.conflist in name order first (the first whose name matches wins);
// then the single-plugin *.conf and *.json files the same way, wrapped into
// a one-plugin list. Unlike libcni, a file that cannot be parsed does not
// abort the search: it is skipped unless it declares this network (then its
// error, naming the file, is returned), and a NotFoundError lists the files
// skipped.
func LoadNetworkConf(dir, name string) (*NetworkConfigList, error) {
	files, err := ConfFiles(dir, []string{".conflist"})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var skipped []error
	for _, confFile := range files {
		conf, err := NetworkConfFromFile(confFile)
		if err != nil {
			if err := skipBroken(confFile, name, err, &skipped); err != nil {
				return nil, err
			}
			continue
		}
		if conf.Name == name {
			return conf, nil
		}
	}
	singleConf, file, err := loadConf(dir, name, &skipped)
	if err != nil {
		var ncfErr NoConfigsFoundError
		if len(files) != 0 && errors.As(err, &ncfErr) {
			// There were conflists, just none with this name.
			return nil, NotFoundError{Dir: dir, Name: name, Skipped: skipped}
		}
		return nil, err
	}
	list, err := ConfListFromConf(singleConf)
	if err != nil {
		return nil, err
	}
	list.File = file
	return list, nil
}

// ConfListFromConf wraps a single plugin config into a list named after it,
// with the plugin's cniVersion. The wrapper's JSON becomes the list's Bytes
// (and so the cached "config"), exactly as libcni generates it.
func ConfListFromConf(original *PluginConfig) (*NetworkConfigList, error) {
	rawConfig := make(map[string]interface{})
	if err := json.Unmarshal(original.Bytes, &rawConfig); err != nil {
		return nil, err
	}
	rawConfigList := map[string]interface{}{
		"name":       original.Network.Name,
		"cniVersion": original.Network.CNIVersion,
		"plugins":    []interface{}{rawConfig},
	}
	b, err := json.Marshal(rawConfigList)
	if err != nil {
		return nil, err
	}
	return NetworkConfFromBytes(b)
}

// greaterThan compares versions numerically with libcni's parse errors.
func greaterThan(v, other string) (bool, error) {
	c, err := cni.CompareVersions(v, other)
	return c > 0, err
}

// greaterThanOrEqual compares versions numerically with libcni's parse
// errors.
func greaterThanOrEqual(v, other string) (bool, error) {
	c, err := cni.CompareVersions(v, other)
	return c >= 0, err
}

// Directory is every network a configuration directory defines.
type Directory struct {
	// Networks are loaded as LoadNetworkConf(dir, name) would load each:
	// conflists in name order first, then the single-plugin .conf and
	// .json files sorted together; each name once, in that order.
	Networks []*NetworkConfigList
	// Shadowed are the files that declare a network an earlier file
	// already declared: runtimes never load them.
	Shadowed []ShadowedFile
	// Skipped are the files that cannot be parsed, each error naming its
	// file.
	Skipped []error
}

// ShadowedFile is a file whose network another file defines first.
type ShadowedFile struct {
	File, Network, By string
}

// LoadDirectory loads every network of dir, for the tools that act on all
// of a host's networks (`nftcni gc --all`, `list`, `validate` without a
// name). A missing directory holds no networks.
func LoadDirectory(dir string) (*Directory, error) {
	d := &Directory{}
	seen := map[string]string{}
	add := func(list *NetworkConfigList) {
		if by, ok := seen[list.Name]; ok {
			d.Shadowed = append(d.Shadowed, ShadowedFile{File: list.File, Network: list.Name, By: by})
			return
		}
		seen[list.Name] = list.File
		d.Networks = append(d.Networks, list)
	}
	lists, err := ConfFiles(dir, []string{".conflist"})
	if err != nil {
		return nil, err
	}
	sort.Strings(lists)
	for _, f := range lists {
		list, err := NetworkConfFromFile(f)
		if err != nil {
			d.Skipped = append(d.Skipped, err)
			continue
		}
		add(list)
	}
	singles, err := ConfFiles(dir, []string{".conf", ".json"})
	if err != nil {
		return nil, err
	}
	sort.Strings(singles)
	for _, f := range singles {
		data, err := os.ReadFile(f)
		if err != nil {
			d.Skipped = append(d.Skipped, fmt.Errorf("error reading %s: %w", f, err))
			continue
		}
		conf, err := NetworkPluginConfFromBytes(data)
		if err != nil {
			d.Skipped = append(d.Skipped, fmt.Errorf("%s: %w", f, err))
			continue
		}
		list, err := ConfListFromConf(conf)
		if err != nil {
			d.Skipped = append(d.Skipped, fmt.Errorf("%s: %w", f, err))
			continue
		}
		list.File = f
		add(list)
	}
	return d, nil
}
