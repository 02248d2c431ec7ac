package kpconfig

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	v1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
)

// kube-proxy's ports and OOM score adjustment.
const (
	HealthzPort = 10256
	MetricsPort = 10249
	OOMScoreAdj = -999
)

// Proxy modes and local-traffic detection modes kube-proxy knows.
const (
	ModeIPTables  v1alpha1.ProxyMode = "iptables"
	ModeIPVS      v1alpha1.ProxyMode = "ipvs"
	ModeNFTables  v1alpha1.ProxyMode = "nftables"
	ModeUserspace v1alpha1.ProxyMode = "userspace"

	LocalClusterCIDR         v1alpha1.LocalMode = "ClusterCIDR"
	LocalNodeCIDR            v1alpha1.LocalMode = "NodeCIDR"
	LocalBridgeInterface     v1alpha1.LocalMode = "BridgeInterface"
	LocalInterfaceNamePrefix v1alpha1.LocalMode = "InterfaceNamePrefix"
)

// New returns a configuration holding kube-proxy's defaults only, as its
// flags start from.
func New() *v1alpha1.KubeProxyConfiguration {
	c := &v1alpha1.KubeProxyConfiguration{}
	c.APIVersion = v1alpha1.SchemeGroupVersion.String()
	c.Kind = "KubeProxyConfiguration"
	Default(c)
	return c
}

// Default fills in kube-proxy's defaults for every unset field, as its
// scheme's defaulting does before it reads a file's values.
func Default(c *v1alpha1.KubeProxyConfiguration) {
	if c.BindAddress == "" {
		c.BindAddress = "0.0.0.0"
	}
	// The servers' defaults follow the family of bindAddress.
	allHost, loopHost := "0.0.0.0", "127.0.0.1"
	if a, err := netip.ParseAddr(c.BindAddress); err == nil && a.Is6() && !a.Is4In6() {
		allHost, loopHost = "[::]", "[::1]"
	}
	c.HealthzBindAddress = withPort(c.HealthzBindAddress, allHost, HealthzPort)
	c.MetricsBindAddress = withPort(c.MetricsBindAddress, loopHost, MetricsPort)
	if c.OOMScoreAdj == nil {
		c.OOMScoreAdj = ptr.To[int32](OOMScoreAdj)
	}
	defDuration(&c.IPTables.SyncPeriod, 30*time.Second)
	defDuration(&c.IPTables.MinSyncPeriod, time.Second)
	if c.IPTables.LocalhostNodePorts == nil {
		c.IPTables.LocalhostNodePorts = ptr.To(true)
	}
	if c.IPTables.MasqueradeBit == nil {
		c.IPTables.MasqueradeBit = ptr.To[int32](14)
	}
	// IPVS keeps a zero minSyncPeriod: upstream defaults only its period.
	defDuration(&c.IPVS.SyncPeriod, 30*time.Second)
	defDuration(&c.NFTables.SyncPeriod, 30*time.Second)
	defDuration(&c.NFTables.MinSyncPeriod, time.Second)
	if c.NFTables.MasqueradeBit == nil {
		c.NFTables.MasqueradeBit = ptr.To[int32](14)
	}
	if c.Conntrack.MaxPerCore == nil {
		c.Conntrack.MaxPerCore = ptr.To[int32](32 * 1024)
	}
	if c.Conntrack.Min == nil {
		c.Conntrack.Min = ptr.To[int32](128 * 1024)
	}
	if c.Conntrack.TCPEstablishedTimeout == nil {
		c.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: 24 * time.Hour}
	}
	if c.Conntrack.TCPCloseWaitTimeout == nil {
		c.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: time.Hour}
	}
	defDuration(&c.ConfigSyncPeriod, 15*time.Minute)
	if c.ClientConnection.ContentType == "" {
		c.ClientConnection.ContentType = "application/vnd.kubernetes.protobuf"
	}
	if c.ClientConnection.QPS == 0 {
		c.ClientConnection.QPS = 5
	}
	if c.ClientConnection.Burst == 0 {
		c.ClientConnection.Burst = 10
	}
	if c.FeatureGates == nil {
		c.FeatureGates = map[string]bool{}
	}
	logsapi.SetRecommendedLoggingConfiguration(&c.Logging)
}

// Complete applies what kube-proxy decides at start rather than in its
// scheme: the mode (iptables) and local detection (ClusterCIDR) when
// unset, and NodePorts on the primary addresses in nftables mode.
func Complete(c *v1alpha1.KubeProxyConfiguration) {
	if c.Mode == "" {
		c.Mode = ModeIPTables
	}
	if c.Mode == ModeNFTables && len(c.NodePortAddresses) == 0 {
		c.NodePortAddresses = []string{"primary"}
	}
	if c.DetectLocalMode == "" {
		c.DetectLocalMode = LocalClusterCIDR
	}
}

// Periods returns the sync and min-sync periods of c's mode: kube-proxy
// reads the ipvs or nftables section for those modes and the iptables
// one otherwise.
func Periods(c *v1alpha1.KubeProxyConfiguration) (sync, min *metav1.Duration) {
	switch c.Mode {
	case ModeIPVS:
		return &c.IPVS.SyncPeriod, &c.IPVS.MinSyncPeriod
	case ModeNFTables:
		return &c.NFTables.SyncPeriod, &c.NFTables.MinSyncPeriod
	default:
		return &c.IPTables.SyncPeriod, &c.IPTables.MinSyncPeriod
	}
}

// MasqueradeAll returns the masqueradeAll of c's mode: the nftables
// section's in nftables mode, the iptables section's otherwise.
func MasqueradeAll(c *v1alpha1.KubeProxyConfiguration) *bool {
	if c.Mode == ModeNFTables {
		return &c.NFTables.MasqueradeAll
	}
	return &c.IPTables.MasqueradeAll
}

// ClusterCIDRs splits the comma-separated clusterCIDR.
func ClusterCIDRs(c *v1alpha1.KubeProxyConfiguration) []string {
	if c.ClusterCIDR == "" {
		return nil
	}
	return strings.Split(c.ClusterCIDR, ",")
}

func defDuration(d *metav1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

// withPort returns addr, given the default port if it has none, or
// host:port if it is empty.
func withPort(addr, host string, port int) string {
	if addr == "" {
		return host + ":" + strconv.Itoa(port)
	}
	if _, err := netip.ParseAddrPort(addr); err == nil {
		return addr
	}
	if a, err := netip.ParseAddr(addr); err == nil {
		return netip.AddrPortFrom(a, uint16(port)).String()
	}
	return addr
}
