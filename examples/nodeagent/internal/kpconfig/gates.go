package kpconfig

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Gate is a feature gate kube-proxy v1.37 reads. The agent knows these
// alone: it does not import k8s.io/component-base/featuregate, whose
// registry holds every Kubernetes component's gates, so a gate of another
// component is refused here where kube-proxy would accept and ignore it.
type Gate struct {
	Name    string
	Default bool
	// Locked gates cannot be set to the other value.
	Locked bool
	// Stage is kube-proxy's: Alpha, Beta, GA or Deprecated.
	Stage string
}

// Gates returns the proxy-related feature gates of kube-proxy v1.37.
func Gates() []Gate {
	return []Gate{
		{Name: "AllowServiceExternalIPs", Default: false, Stage: "Alpha"},
		{Name: "KubeProxyIPVS", Default: true, Stage: "Deprecated"},
		{Name: "KubeProxyNFTablesLocalhostNodePorts", Default: false, Stage: "Alpha"},
		{Name: "MultiCIDRServiceAllocator", Default: true, Locked: true, Stage: "GA"},
		{Name: "NFTablesNetlink", Default: true, Stage: "Beta"},
		{Name: "PreferSameTrafficDistribution", Default: true, Locked: true, Stage: "GA"},
		{Name: "WinDSR", Default: true, Locked: true, Stage: "GA"},
		{Name: "WinOverlay", Default: true, Locked: true, Stage: "GA"},
	}
}

// Enabled returns whether the gate name is on under the settings given.
func Enabled(settings map[string]bool, name string) bool {
	if v, ok := settings[name]; ok {
		return v
	}
	for _, g := range Gates() {
		if g.Name == name {
			return g.Default
		}
	}
	return false
}

// checkGates returns why settings cannot be applied, or nil.
func checkGates(settings map[string]bool) error {
	gates := Gates()
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		i := slices.IndexFunc(gates, func(g Gate) bool { return g.Name == name })
		if i < 0 {
			return fmt.Errorf("unrecognized feature gate %q (the proxy's gates are %s)", name, strings.Join(GateNames(), ", "))
		}
		if g := gates[i]; g.Locked && settings[name] != g.Default {
			return fmt.Errorf("cannot set feature gate %s to %v: locked to %v", name, settings[name], g.Default)
		}
	}
	return nil
}

// GateNames returns the names of Gates.
func GateNames() []string {
	gates := Gates()
	out := make([]string, len(gates))
	for i, g := range gates {
		out[i] = g.Name
	}
	return out
}

// ParseGates parses the --feature-gates flag's "Name=bool,Name=bool" into
// settings, as component-base's map flag does: later values win.
func ParseGates(s string, settings map[string]bool) error {
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("missing bool value for %s", kv)
		}
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("invalid value of %s: %s", k, v)
		}
		settings[strings.TrimSpace(k)] = b
	}
	return nil
}
