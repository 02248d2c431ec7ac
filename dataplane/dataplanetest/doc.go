// Package dataplanetest is the conformance suite every dataplane runs, ours
// and vendors', plus a recording fake Dataplane and the fixture helpers the
// suite's scenarios are written with.
//
// A scenario is a small cluster (Services, EndpointSlices, this Node and
// proxy Settings) and a table of packets with the verdict Kubernetes
// semantics give each of them. The tables reproduce the packet-flow cases of
// upstream kube-proxy's iptables proxier tests, with upstream's fixture
// addresses: pods in 10.0.0.0/8, cluster IPs in 172.30.0.0/16, this node at
// 192.168.0.2 (and 192.168.1.2, 2001:db8::1, 2001:db8:1::2), external IPs
// in 192.168.99.0/24, LoadBalancer VIPs 1.2.3.4, 5.6.7.8 and 9.10.11.12, and
// outside clients in 203.0.113.0/24.
//
// # Running the suite against a dataplane
//
// A vendor wraps its dataplane in a Harness: the Dataplane itself plus a
// Trace method that reports where the programmed dataplane sends a packet
// (by evaluating the rules it wrote, by asking the kernel, or by sending a
// real packet in a test network namespace). Then:
//
//	func TestConformance(t *testing.T) {
//		dataplanetest.Run(t, func(t *testing.T) dataplanetest.Harness {
//			return newMyHarness(t) // a fresh, empty dataplane
//		})
//	}
//
// For every scenario Run builds the State with a dataplane.Builder, Syncs it
// into a fresh harness and requires every packet's Trace to equal both the
// table's expected verdict and State.Lookup (so the table itself is checked
// against the specification). It then removes an endpoint, Syncs again and
// requires Trace to follow Lookup, and finally calls Cleanup and requires
// that nothing is a service any more.
//
// A harness that can reproduce only some cases (a real kernel cannot
// originate every source address the tables use) runs a subset:
//
//	scenarios := dataplanetest.Filter(dataplanetest.Scenarios(), dataplanetest.HasTag(dataplanetest.TagKernelSafe))
//	dataplanetest.RunScenarios(t, scenarios, newHarness)
//
// Package kerneltest is such a harness for any dataplane that programs a
// Linux network namespace: it sends every case as real connections.
//
// Verdicts are compared on Action, Service, Endpoints, Hairpin, Masquerade
// and Affinity; Reason is for people and is never compared. A harness that
// cannot see some of them implements Partial, and is compared on the rest.
package dataplanetest
