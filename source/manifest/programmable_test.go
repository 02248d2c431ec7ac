package manifest

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/internal/ruleport"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// builderHandler feeds a source's objects to a Builder, as the proxy does.
type builderHandler struct {
	b      *dataplane.Builder
	synced chan struct{}
}

func (h *builderHandler) OnService(old, new *v1.Service) { h.b.UpdateService(old, new) }
func (h *builderHandler) OnEndpointSlice(old, new *discovery.EndpointSlice) {
	h.b.UpdateEndpointSlice(old, new)
}
func (h *builderHandler) OnNode(_, new *v1.Node) { h.b.UpdateNode(new) }
func (h *builderHandler) Synced()                { close(h.synced) }

// TestServedIsProgrammable: what a manifest source serves, objects at the
// API server's limits included, is what the model answers for and what
// every dataplane writes, without a skip; what the API server would refuse
// (and some dataplane would skip) never reaches the model, so explain and
// list never answer for what no dataplane programs.
func TestServedIsProgrammable(t *testing.T) {
	long := func(c string) string { return strings.Repeat(c, 63) }
	ns, name, portA, portB := long("n"), long("s"), long("a"), long("b")
	valid := `apiVersion: v1
kind: Service
metadata:
  name: ` + name + `
  namespace: ` + ns + `
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.10
  externalIPs: [192.0.2.7]
  loadBalancerSourceRanges: [198.51.100.0/24]
  sessionAffinity: ClientIP
  sessionAffinityConfig:
    clientIP:
      timeoutSeconds: 86400
  ports:
  - name: ` + portA + `
    port: 80
    nodePort: 30080
  - name: ` + portB + `
    port: 53
    protocol: SCTP
    nodePort: 30053
status:
  loadBalancer:
    ingress:
    - ip: 203.0.113.9
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ` + name + `-abcde
  namespace: ` + ns + `
  labels:
    kubernetes.io/service-name: ` + name + `
addressType: IPv4
ports:
- name: ` + portA + `
  port: 8080
- name: ` + portB + `
  port: 5353
  protocol: SCTP
endpoints:
- addresses: [10.244.1.5]
  nodeName: test-node
- addresses: [10.244.2.9]
---
` + nodeYAML
	refused := []string{
		strings.Replace(badService("", port80), "name: bad", "name: "+strings.Repeat("s", 200), 1),
		badService("", "  clusterIP: 172.30.0.11\n  ports:\n  - name: "+strings.Repeat("p", 64)+"\n    port: 80\n"),
		badService("", "  clusterIP: 172.30.0.12\n  ports:\n  - port: 80\n    protocol: ICMP\n"),
		strings.Replace(badSlice("  labels:\n    kubernetes.io/service-name: "+name+"\n", endpointsAt("127.0.0.1")), "namespace: demo", "namespace: "+ns, 1),
		strings.Replace(strings.Replace(badSlice("  labels:\n    kubernetes.io/service-name: "+name+"\n", endpointsAt("169.254.169.254")), "namespace: demo", "namespace: "+ns, 1), "name: bad", "name: bad2", 1),
		strings.Replace(strings.Replace(badSlice("  labels:\n    kubernetes.io/service-name: "+name+"\n", endpointsAt("224.0.0.1")), "namespace: demo", "namespace: "+ns, 1), "name: bad", "name: bad3", 1),
	}
	// The refused slices name the served port: had they been served, its
	// endpoints would include theirs.
	for i := 3; i < len(refused); i++ {
		refused[i] = strings.Replace(refused[i], "- name: http\n", "- name: "+portA+"\n", 1)
	}
	path := filepath.Join(t.TempDir(), "all.yaml")
	writeFile(t, path, valid+"---\n"+strings.Join(refused, "---\n"))

	var skips []string
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: "test-node",
		OnSkip: func(kind, reason string) { skips = append(skips, kind+": "+reason) }})
	h := &builderHandler{b: b, synced: make(chan struct{})}
	var log refusalLog
	runSource(t, New(path, Config{Logger: log.logger()}), h)
	<-h.synced
	if n := len(log.refusals()); n != len(refused) {
		t.Errorf("%d refusals logged, want %d: %q", n, len(refused), log.refusals())
	}
	st := b.Build().States[0]
	if len(skips) != 0 {
		t.Errorf("the model skipped %q", skips)
	}
	var ports []string
	for sp := range st.Services.All() {
		ports = append(ports, sp.Name.Port)
		p, reason := ruleport.Check(sp, false, func(r string) { t.Errorf("%s: a dataplane drops part of it: %s", sp.Name, r) })
		if reason != "" {
			t.Errorf("%s: the model serves it, the dataplanes skip it: %s", sp.Name, reason)
			continue
		}
		if len(p.ExternalIPs) != 1 || len(p.LBVIPs) != 1 || len(p.SourceRanges) != 1 {
			t.Errorf("%s: addresses %v %v %v, want one of each", sp.Name, p.ExternalIPs, p.LBVIPs, p.SourceRanges)
		}
		eps := st.Endpoints.Get(sp.Name)
		if len(eps) != 2 {
			t.Errorf("%s: endpoints %v, want the two valid ones", sp.Name, eps)
		}
		for _, e := range eps {
			if !ruleport.UsableEndpoint(e, false) {
				t.Errorf("%s: endpoint %v in the model, skipped by the dataplanes", sp.Name, e)
			}
		}
	}
	if len(ports) != 2 {
		t.Errorf("service ports %q, want %s and %s only", ports, portA, portB)
	}
}
