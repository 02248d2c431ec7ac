package suite

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// The upstream suite the selection is read from.
const (
	KubernetesVersion = "v1.37.2"
	Kubernetes        = "k8s.io/kubernetes " + KubernetesVersion
)

// The describe blocks of k8s.io/kubernetes/test/e2e (v1.37.2) that test a
// service proxy: every spec whose full name starts with one of them is in
// the selection.
const (
	GroupServices  = "[sig-network] Services"
	GroupGranular  = "[sig-network] Networking Granular Checks: Services"
	GroupConntrack = "[sig-network] Conntrack"
	GroupKubeProxy = "[sig-network] KubeProxy"
)

// Groups returns the selected describe blocks in the order the report lists
// them.
func Groups() []string {
	return []string{GroupServices, GroupGranular, GroupConntrack, GroupKubeProxy}
}

// GroupOf returns the group a spec's full name belongs to, or "" when it is
// in none.
func GroupOf(name string) string {
	for _, g := range Groups() {
		// The space keeps "[sig-network] Services" from matching a block
		// named "[sig-network] ServicesSomething".
		if strings.HasPrefix(name, g+" ") {
			return g
		}
	}
	return ""
}

// Focus names a preset selection.
type Focus string

const (
	// FocusAll is every spec of the groups (the zero Focus means it too).
	FocusAll Focus = "all"
	// FocusConformance is only the groups' [Conformance] specs: the subset
	// CI runs.
	FocusConformance Focus = "conformance"
)

// ParseFocus checks a -focus value.
func ParseFocus(s string) (Focus, error) {
	switch Focus(s) {
	case "", FocusAll:
		return FocusAll, nil
	case FocusConformance:
		return FocusConformance, nil
	}
	return "", fmt.Errorf("focus %q: want %q or %q", s, FocusAll, FocusConformance)
}

// Regexp returns the ginkgo --focus expression of f. Ginkgo matches it
// against "<suite description> <full spec name>", so it is not anchored at
// the start.
func (f Focus) Regexp() string {
	quoted := make([]string, 0, 4)
	for _, g := range Groups() {
		quoted = append(quoted, regexp.QuoteMeta(g))
	}
	groups := `(?:` + strings.Join(quoted, "|") + `) `
	if f == FocusConformance {
		return groups + `.*\[Conformance\]`
	}
	return groups
}

// Selects reports whether a spec's full name is in f's selection (before
// the specs that cannot run here are taken out).
func (f Focus) Selects(name string) bool {
	return GroupOf(name) != "" && (f != FocusConformance || strings.Contains(name, "[Conformance]"))
}

// Unrunnable is a selected spec this fixture cannot host, and why.
type Unrunnable struct {
	Name   string // the spec's full name
	Reason string
	// NeedsSCTP: it cannot run only where the kernel has no SCTP.
	NeedsSCTP bool
}

const (
	whyRestartProxy = "[Disruptive]: it restarts kube-proxy by deleting its pods " +
		"(kube-system, k8s-app=kube-proxy) and skips unless the proxy runs as pods the client may delete; " +
		"here the proxy is a process on each node, which the framework cannot restart"
	whyRestartAPIServer = "[Disruptive]: it restarts the API server by deleting its pod " +
		"(kube-system, component=kube-apiserver) and skips unless it runs as a pod the client may delete; " +
		"here kube-apiserver is a process on node 1, which the framework cannot restart"
	whySCTPService = "the kernel has no SCTP: the test checks that creating an SCTP Service does not load " +
		"the sctp module, which says nothing where there is none to load"
	whySCTPTraffic = "the kernel has no SCTP ([Feature:SCTPConnectivity] sends SCTP traffic through the service)"
)

// Unrunnables returns the selected specs of k8s.io/kubernetes v1.37.2 that
// this fixture cannot host, read from the tests' source; Run skips them
// (those needing SCTP only where the kernel lacks it). IPv6, dual-stack
// and cloud load-balancer specs are in none of the groups: the one named
// "Type LoadBalancer" reaches its service through the cluster IP.
func Unrunnables() []Unrunnable {
	return []Unrunnable{
		{Name: GroupServices + " should work after restarting kube-proxy [Disruptive]", Reason: whyRestartProxy},
		{Name: GroupServices + " should work after restarting apiserver [Disruptive]", Reason: whyRestartAPIServer},
		{Name: GroupServices + " should allow creating a basic SCTP service with pod and endpoints [LinuxOnly] [Serial]", Reason: whySCTPService, NeedsSCTP: true},
		{Name: GroupGranular + " should function for pod-Service: sctp [Feature:SCTPConnectivity]", Reason: whySCTPTraffic, NeedsSCTP: true},
		{Name: GroupGranular + " should function for node-Service: sctp [Feature:SCTPConnectivity]", Reason: whySCTPTraffic, NeedsSCTP: true},
		{Name: GroupGranular + " should function for endpoint-Service: sctp [Feature:SCTPConnectivity]", Reason: whySCTPTraffic, NeedsSCTP: true},
	}
}

// Skipped returns the Unrunnables Run skips on a kernel with or without
// SCTP, by name.
func Skipped(sctp bool) map[string]string {
	m := map[string]string{}
	for _, u := range Unrunnables() {
		if !u.NeedsSCTP || !sctp {
			m[u.Name] = u.Reason
		}
	}
	return m
}

// SkipRegexp returns the ginkgo --skip expression that leaves out the
// specs of skipped, each by its exact name.
func SkipRegexp(skipped map[string]string) string {
	if len(skipped) == 0 {
		return ""
	}
	quoted := make([]string, 0, len(skipped))
	for name := range skipped {
		quoted = append(quoted, regexp.QuoteMeta(name))
	}
	// Sorted, so that a run's command line is the same every time.
	slices.Sort(quoted)
	return `(?:` + strings.Join(quoted, "|") + `)$`
}

// NodesNeeded returns how many Ready schedulable nodes a spec needs
// before it does more than skip itself, and where the source says so; 1
// and "" for the rest.
func NodesNeeded(name string) (int, string) {
	switch GroupOf(name) {
	case GroupGranular:
		return 2, "NetworkingTestConfig's setup calls SkipUnlessNodeCountIsAtLeast(2)"
	case GroupConntrack:
		return 2, "the Conntrack BeforeEach picks a client node and a server node"
	}
	switch strings.TrimPrefix(name, GroupKubeProxy+" ") {
	case "should set TCP CLOSE_WAIT timeout [Privileged]":
		return 2, "it connects from one node to a server on another"
	}
	switch strings.TrimPrefix(name, GroupServices+" ") {
	case "should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes":
		return 3, "it needs an endpoint node, an exec pod node and a third node"
	case "should support externalTrafficPolicy=Local for type=NodePort":
		return 2, "SkipUnlessNodeCountIsAtLeast(2): the client must be on another node than the endpoint"
	case "should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]",
		"should be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is true",
		"should not be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is false",
		"should respect internalTrafficPolicy=Local Pod to Pod",
		"should respect internalTrafficPolicy=Local Pod (hostNetwork: true) to Pod",
		"should respect internalTrafficPolicy=Local Pod and Node, to Pod (hostNetwork: true)",
		"should fail health check node port if there are only terminating endpoints",
		"should fallback to terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Cluster",
		"should fallback to local terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Local",
		"should fallback to terminating endpoints when there are no ready endpoints with externallTrafficPolicy=Cluster",
		"should fallback to local terminating endpoints when there are no ready endpoints with externalTrafficPolicy=Local":
		return 2, "it skips with fewer than two ready nodes: client and server on different nodes"
	}
	return 1, ""
}

// KernelHasSCTP reports whether this machine's kernel has SCTP: registered
// in /proc/net/protocols, or a module for the running kernel to load.
func KernelHasSCTP() (bool, error) {
	b, err := os.ReadFile("/proc/net/protocols")
	if err != nil {
		return false, fmt.Errorf("reading the kernel's protocols: %w", err)
	}
	if protocolsHaveSCTP(string(b)) {
		return true, nil
	}
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return false, fmt.Errorf("reading the kernel release: %w", err)
	}
	_, err = os.Stat("/lib/modules/" + strings.TrimSpace(string(release)) + "/kernel/net/sctp")
	return err == nil, nil
}

// protocolsHaveSCTP reads /proc/net/protocols: one protocol a line, its
// name first.
func protocolsHaveSCTP(protocols string) bool {
	for _, line := range strings.Split(protocols, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "SCTP" {
			return true
		}
	}
	return false
}
