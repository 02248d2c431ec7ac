package report

import "github.com/proxykit/proxykit/test/e2e/suite"

// Explanation says why a spec's verdict in one of proxykit's modes may
// differ from kube-proxy's: the mode's documented semantics
// (dataplane.LookupMode and the dataplane package documentation), or the
// spec itself choosing by mode.
type Explanation struct {
	Spec string // full name
	Mode string // the proxykit mode
	Why  string
}

const (
	whyUserspaceMasquerades = "userspace mode connects to every endpoint from the proxy's own address " +
		"(dataplane.LookupMode(ModeUserspace): every DNAT is masqueraded), so the endpoint sees the node's " +
		"address where the spec expects the client's"
	whyNFAcctIPTablesOnly = "the spec reads the proxy's /proxyMode and skips itself unless it is iptables " +
		"(with route_localnet set): it tests a metric of iptables mode alone"
)

// Explanations returns every documented reason for a verdict to differ
// from kube-proxy's. The report lists each with what was observed, and
// lists apart any difference none of them explains.
func Explanations() []Explanation {
	const (
		services  = suite.GroupServices + " "
		kubeProxy = suite.GroupKubeProxy + " "
		nfacct    = kubeProxy + "should update metric for tracking accepted packets destined for localhost nodeports [Feature:KubeProxyNFAcct]"
	)
	return []Explanation{
		{Spec: services + "should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]", Mode: "userspace", Why: whyUserspaceMasquerades},
		{Spec: services + "should support externalTrafficPolicy=Local for type=NodePort", Mode: "userspace", Why: whyUserspaceMasquerades},
		{Spec: services + "should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes", Mode: "userspace",
			Why: whyUserspaceMasquerades + " (it checks the client IP a node port with externalTrafficPolicy Local passes on)"},
		{Spec: services + "should fallback to local terminating endpoints when there are no ready endpoints with externalTrafficPolicy=Local", Mode: "userspace",
			Why: "a pod on node 0 asks node 1's node port, where the service (externalTrafficPolicy Local) has no endpoint: " +
				"pod traffic to an external destination takes the cluster policy (State.Lookup, as kube-proxy's short-circuit rule), " +
				"which reaches the terminating endpoint on node 0. kube-proxy DNATs it without masquerading, so the endpoint " +
				"answers the pod directly, the reply misses node 1's conntrack entry and the connection fails, which is what the spec expects. " +
				"Userspace mode connects to the endpoint from node 1's own address (dataplane.LookupMode(ModeUserspace): every DNAT is " +
				"masqueraded), so the reply comes back through node 1 and the connection succeeds"},
		{Spec: nfacct, Mode: "nftables", Why: whyNFAcctIPTablesOnly},
		{Spec: nfacct, Mode: "userspace", Why: whyNFAcctIPTablesOnly},
		{Spec: nfacct, Mode: "ipvs", Why: whyNFAcctIPTablesOnly},
	}
}

func explanationFor(spec, mode string) (string, bool) {
	for _, e := range Explanations() {
		if e.Spec == spec && e.Mode == mode {
			return e.Why, true
		}
	}
	return "", false
}
