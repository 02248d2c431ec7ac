package kpconfig

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	v1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

// ValidateOptions widens validation beyond kube-proxy's.
type ValidateOptions struct {
	// ExtraModes are proxy modes accepted besides kube-proxy's own.
	ExtraModes []v1alpha1.ProxyMode
}

// Validate checks a completed configuration as kube-proxy does. Errors
// name fields by their path in the file (iptables.masqueradeBit). Unlike
// kube-proxy, an empty metricsBindAddress is valid: it disables the
// metrics server. Stricter than kube-proxy, in every mode, so that no
// value reaches a rule unchecked: the interface of the detect-local mode
// in use must be a name dataplane.IsInterfaceName (or, for a prefix,
// IsInterfaceNamePrefix) accepts, where kube-proxy refuses only an empty
// one and writes any other into its rules; and clusterCIDR and
// nodePortAddresses take no IPv4-mapped IPv6 CIDR.
func Validate(c *v1alpha1.KubeProxyConfiguration, o ValidateOptions) field.ErrorList {
	var errs field.ErrorList
	if err := checkGates(c.FeatureGates); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("featureGates"), c.FeatureGates, err.Error()))
	}
	errs = append(errs, masqueradeBit(c.IPTables.MasqueradeBit, field.NewPath("iptables", "masqueradeBit"))...)
	modes := []v1alpha1.ProxyMode{ModeIPTables, ModeNFTables}
	if Enabled(c.FeatureGates, "KubeProxyIPVS") {
		modes = append(modes, ModeIPVS)
	}
	modes = append(modes, o.ExtraModes...)
	switch c.Mode {
	case ModeIPVS:
		p := field.NewPath("ipvs")
		errs = append(errs, nonNegative(p.Child("tcpTimeout"), c.IPVS.TCPTimeout)...)
		errs = append(errs, nonNegative(p.Child("tcpFinTimeout"), c.IPVS.TCPFinTimeout)...)
		errs = append(errs, nonNegative(p.Child("udpTimeout"), c.IPVS.UDPTimeout)...)
		for i, s := range c.IPVS.ExcludeCIDRs {
			if _, err := netip.ParsePrefix(s); err != nil {
				errs = append(errs, field.Invalid(p.Child("excludeCIDRs").Index(i), s, "must be a valid CIDR"))
			}
		}
	case ModeNFTables:
		errs = append(errs, masqueradeBit(c.NFTables.MasqueradeBit, field.NewPath("nftables", "masqueradeBit"))...)
	}
	if !slices.Contains(modes, c.Mode) {
		names := make([]string, len(modes))
		for i, m := range modes {
			names[i] = string(m)
		}
		errs = append(errs, field.NotSupported(field.NewPath("mode"), c.Mode, names))
	}
	ct := field.NewPath("conntrack")
	if c.Conntrack.MaxPerCore != nil && *c.Conntrack.MaxPerCore < 0 {
		errs = append(errs, field.Invalid(ct.Child("maxPerCore"), *c.Conntrack.MaxPerCore, "must be greater than or equal to 0"))
	}
	if c.Conntrack.Min != nil && *c.Conntrack.Min < 0 {
		errs = append(errs, field.Invalid(ct.Child("min"), *c.Conntrack.Min, "must be greater than or equal to 0"))
	}
	if d := c.Conntrack.TCPEstablishedTimeout; d != nil {
		errs = append(errs, nonNegative(ct.Child("tcpEstablishedTimeout"), *d)...)
	}
	if d := c.Conntrack.TCPCloseWaitTimeout; d != nil {
		errs = append(errs, nonNegative(ct.Child("tcpCloseWaitTimeout"), *d)...)
	}
	errs = append(errs, nonNegative(ct.Child("udpTimeout"), c.Conntrack.UDPTimeout)...)
	errs = append(errs, nonNegative(ct.Child("udpStreamTimeout"), c.Conntrack.UDPStreamTimeout)...)
	if a := c.OOMScoreAdj; a != nil && (*a < -1000 || *a > 1000) {
		errs = append(errs, field.Invalid(field.NewPath("oomScoreAdj"), *a, "must be within the range [-1000, 1000]"))
	}
	if c.ClientConnection.Burst < 0 {
		errs = append(errs, field.Invalid(field.NewPath("clientConnection", "burst"), c.ClientConnection.Burst, "must be greater than or equal to 0"))
	}
	if c.ConfigSyncPeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("configSyncPeriod"), c.ConfigSyncPeriod.Duration.String(), "must be greater than 0"))
	}
	sync, min := Periods(c)
	section := "iptables"
	if c.Mode == ModeIPVS || c.Mode == ModeNFTables {
		section = string(c.Mode)
	}
	switch {
	case sync.Duration <= 0:
		errs = append(errs, field.Invalid(field.NewPath(section, "syncPeriod"), sync.Duration.String(), "must be greater than 0"))
	case min.Duration < 0:
		errs = append(errs, field.Invalid(field.NewPath(section, "minSyncPeriod"), min.Duration.String(), "must be greater than or equal to 0"))
	case min.Duration > sync.Duration:
		errs = append(errs, field.Invalid(field.NewPath(section, "syncPeriod"), sync.Duration.String(), "must be greater than or equal to "+section+".minSyncPeriod ("+min.Duration.String()+")"))
	}
	if _, err := netip.ParseAddr(c.BindAddress); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("bindAddress"), c.BindAddress, "not a valid textual representation of an IP address"))
	}
	if c.HealthzBindAddress != "" {
		errs = append(errs, hostPort(c.HealthzBindAddress, field.NewPath("healthzBindAddress"))...)
	}
	if c.MetricsBindAddress != "" {
		errs = append(errs, hostPort(c.MetricsBindAddress, field.NewPath("metricsBindAddress"))...)
	}
	errs = append(errs, nodePortAddresses(c.NodePortAddresses, field.NewPath("nodePortAddresses"))...)
	errs = append(errs, detectLocal(c)...)
	switch f := c.Logging.Format; f {
	case "text", "json":
	default:
		errs = append(errs, field.NotSupported(field.NewPath("logging", "format"), f, []string{"text", "json"}))
	}
	return errs
}

func masqueradeBit(b *int32, p *field.Path) field.ErrorList {
	if b != nil && (*b < 0 || *b > 31) {
		return field.ErrorList{field.Invalid(p, *b, "must be within the range [0, 31]")}
	}
	return nil
}

func nonNegative(p *field.Path, d metav1.Duration) field.ErrorList {
	if d.Duration < 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be greater than or equal to 0")}
	}
	return nil
}

func hostPort(s string, p *field.Path) field.ErrorList {
	host, port, err := splitHostPort(s)
	if err != nil {
		return field.ErrorList{field.Invalid(p, s, "must be IP:port")}
	}
	var errs field.ErrorList
	if _, err := netip.ParseAddr(host); err != nil {
		errs = append(errs, field.Invalid(p, host, "must be a valid IP"))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		errs = append(errs, field.Invalid(p, port, "must be a valid port"))
	}
	return errs
}

func splitHostPort(s string) (host, port string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", fmt.Errorf("no port")
	}
	host, port = s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	} else if strings.Contains(host, ":") {
		return "", "", fmt.Errorf("IPv6 address not in brackets")
	}
	return host, port, nil
}

func nodePortAddresses(list []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, s := range list {
		switch s {
		case "primary", "localhost", "all":
			if seen[s] {
				errs = append(errs, field.Duplicate(p.Index(i), s))
			}
			seen[s] = true
			continue
		}
		switch pfx, err := netip.ParsePrefix(s); {
		case err != nil:
			errs = append(errs, field.Invalid(p.Index(i), s, "must be a valid CIDR or one of the keywords 'primary', 'localhost', 'all'"))
		case pfx.Addr().Is4In6():
			errs = append(errs, field.Invalid(p.Index(i), s, mappedCIDR))
		}
	}
	return errs
}

func detectLocal(c *v1alpha1.KubeProxyConfiguration) field.ErrorList {
	modes := []string{string(LocalClusterCIDR), string(LocalNodeCIDR), string(LocalBridgeInterface), string(LocalInterfaceNamePrefix), ""}
	if !slices.Contains(modes, string(c.DetectLocalMode)) {
		return field.ErrorList{field.NotSupported(field.NewPath("detectLocalMode"), c.DetectLocalMode, modes)}
	}
	switch c.DetectLocalMode {
	case LocalBridgeInterface:
		return interfaceName(c.DetectLocal.BridgeInterface, field.NewPath("detectLocal", "bridgeInterface"), dataplane.IsInterfaceName)
	case LocalInterfaceNamePrefix:
		return interfaceName(c.DetectLocal.InterfaceNamePrefix, field.NewPath("detectLocal", "interfaceNamePrefix"), dataplane.IsInterfaceNamePrefix)
	case LocalClusterCIDR:
		return clusterCIDRs(ClusterCIDRs(c), field.NewPath("clusterCIDR"))
	}
	return nil
}

// interfaceName refuses, with one error per reason, a name the rules
// cannot hold: kube-proxy refuses only an empty one, and writes any other
// into its rules as given (see dataplane.IsInterfaceName).
func interfaceName(name string, p *field.Path, check func(string) []string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range check(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// mappedCIDR is why an IPv4-mapped IPv6 CIDR is refused, where kube-proxy
// takes it for IPv4 or IPv6 depending on the check: it matches no packet
// of either family.
const mappedCIDR = "must not be an IPv4-mapped IPv6 CIDR: give the IPv4 CIDR"

func clusterCIDRs(list []string, p *field.Path) field.ErrorList {
	const pair = "must be either a single CIDR or a dual-stack pair of CIDRs (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)"
	if len(list) == 0 {
		return nil
	}
	if len(list) > 2 {
		return field.ErrorList{field.Invalid(p, strings.Join(list, ","), pair)}
	}
	var errs field.ErrorList
	var v4 int
	for i, s := range list {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			errs = append(errs, field.Invalid(p.Index(i), s, "must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)"))
			continue
		}
		if pfx.Addr().Is4In6() {
			errs = append(errs, field.Invalid(p.Index(i), s, mappedCIDR))
			continue
		}
		if pfx.Addr().Is4() {
			v4++
		}
	}
	if len(errs) == 0 && len(list) == 2 && v4 != 1 {
		errs = append(errs, field.Invalid(p, strings.Join(list, ","), pair))
	}
	return errs
}
