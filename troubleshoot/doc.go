// Package troubleshoot answers "why is my Service not reachable?" from the
// model the rules are built from (dataplane.State) and from what the
// dataplanes read back of the kernel, so that an operator need not walk
// the checklist by hand with kubectl, iptables-save and conntrack.
//
// # Diagnose
//
// Diagnose walks one Service through the checklist, for every IP family
// the node proxies: which ports and frontends it has here; each endpoint's
// conditions, node, zone and hints; which endpoints serve cluster-wide and
// node-local traffic and why (State.Select: readiness, the terminating
// fallback, traffic policies, topology); whether the kernel's rules do at
// each frontend what the model says (Config.Kernel); conntrack entries
// still pointing at endpoints that no longer serve (Config.Flows); and,
// for a client (Config.Client), whether loadBalancerSourceRanges let it
// in. Each answer that needs attention is a Finding, a Problem (some
// traffic fails) or a Warning, and the Report ends in a one-line Verdict:
// the first problem, or "OK: 3 endpoints, rules in place". The branches:
//
//   - the Service is not proxied here (missing, headless, ExternalName,
//     another family, another proxy's), or has no such port;
//   - no endpoints; endpoints only under another port name (a port name
//     mismatch) or of another IP family;
//   - no ready endpoints: all terminating and not serving (rejected), or
//     terminating but serving (the fallback; a warning);
//   - topology hints ignored: none names this node's zone (the wrong
//     zone), the node has no zone, or some ready endpoint has no hint;
//   - internal or external traffic policy Local with no endpoint on this
//     node, which drops that traffic here;
//   - a client outside loadBalancerSourceRanges;
//   - a client of another family than the Service's;
//   - the kernel differs from the model (see Verify);
//   - stale conntrack entries.
//
// Report.WriteText prints it for people; a Report is also JSON.
//
// # Verify
//
// Verify sends probe packets (from an off-node source: to the cluster IP,
// external IPs, LoadBalancer VIPs from inside and outside their source
// ranges, and the node port on each node address) through the model
// (State.LookupMode) and through a Kernel, and reports each difference as
// a Mismatch: rules Missing, Extra (also whole service ports the kernel
// holds and the model lacks, from a ServiceLister), WrongEndpoints,
// Shadowed (a rule that is not the proxy's decides first), WrongVerdict,
// or Untraceable (a rule the reading cannot follow).
//
// The kernel readings are the dataplanes' own, behind the interfaces this
// package defines (Kernel, ServiceLister, FrontendLister, ListenerLister),
// so that it imports no dataplane backend and a new one needs no change
// here. The caller (the node agent) reads the kernel and hands the
// reading over:
//
//   - xtables.Reading, the iptables dataplane's: iptables-save's listing
//     of the nat, filter and mangle tables, everyone's rules, followed by
//     the toolkit's tracer. It sees another program's rules too: a
//     REDIRECT, a TPROXY, or a DNAT of the port alone of a packet for a
//     node address is a DNAT to a socket of the node; set matches follow
//     the node's ipsets (ipvs.ReadIPSets).
//   - nftables.Reading, the nftables dataplane's: its table as nft lists
//     it and, with Others, the other tables whose base chains run first.
//   - userspace.Reading, the userspace dataplane's in redirect mode: its
//     rules read as xtables.Reading reads them, to forwarders that listen
//     where each rule leads (where none does, the kernel drops a TPROXY's
//     packet and refuses the others) and route by the model.
//   - ipvs.NamedReading, the ipvs dataplane's, after the other programs'
//     iptables rules (NamedReading.Others: xtables.NewReadingWithout the
//     dataplane's chains): its virtual and real servers, link addresses,
//     ipsets and chains as ipvs.Dataplane.Read finds them, followed by
//     ipvs.Reading.Trace. The kernel holds no service names there, so a
//     frontend is named after the model's service port at it, and virtual
//     servers no service port of the model has are reported as Extra
//     frontends (FrontendLister).
//
// VerifyListeners is the counterpart for a dataplane that serves
// in-process (a ListenerLister, such as the userspace dataplane): it
// compares the model's frontends with the ones its forwarders listen for.
//
// # List
//
// List gives one Row per frontend of every service port, with its
// backends, their state and whether this node sends them traffic, like
// "cilium service list"; WriteList prints the rows as a table.
//
// Nothing here changes the kernel or the States, and nothing blocks:
// reading the kernel (iptables-save, nft, ipvs.Dataplane.Read, conntrack)
// is the caller's.
package troubleshoot
