// Package validation refuses, at the source, the Services, EndpointSlices,
// Nodes and ServiceCIDRs the Kubernetes API server would refuse, in the API server's
// own words and field paths ("spec.ports[0].port: Invalid value: 0: must
// be between 1 and 65535, inclusive").
//
// A cluster's proxy only ever sees objects the API server validated. A
// manifest file, a fake clientset or an object written around the API
// server has not been: a 200-character Service name, a port 0, an
// endpoint at 127.0.0.1 or 169.254.169.254. Without this package the
// model (dataplane.State, and the node agent's explain and list) would
// answer for them while the dataplanes skip them, or a dataplane would
// forward to the node's loopback or its cloud's metadata service.
//
// It sits on the source side, before the trackers, so that every
// consumer of a source (the model, every dataplane, troubleshooting)
// agrees on one set of objects. The trackers stay permissive: they take
// any object a program hands them and skip, with a logged reason, only
// what they cannot represent. source/manifest checks every object it
// decodes (Create), source/informer every object it is sent (Stored);
// each hands on only the objects that pass, logs the others at the
// default level and counts them in
// proxykit_source_objects_refused_total{source, kind} (a Checker). A
// program with a source of its own (source.Static, source.Func) checks its
// objects with Validate or a Checker before it hands them on: the model
// and the dataplanes then agree for it too.
//
// The checks are the API server's (k8s.io/kubernetes v1.37
// pkg/apis/core/validation, pkg/apis/discovery/validation and
// pkg/apis/networking/validation), written
// with apimachinery's own building blocks (its ValidateObjectMeta, name,
// label, port, IP and CIDR checks, and field errors), so that the
// messages and paths are the ones kubectl would print. They cover what a
// proxy reads and the API server's size limits: object metadata whole
// (names, namespaces, labels, the 256 KiB annotation limit), every
// field of a Service's spec and its status.loadBalancer, every field of
// an EndpointSlice (at most 1,000 endpoints, 100 addresses each, 20,000
// ports), a Node's metadata, spec.podCIDRs and spec.taints, and every
// field of a ServiceCIDR.
//
// # Where it differs from the API server
//
// Looser, because no API server is at hand:
//   - An object is judged as the API server would judge it after
//     applying its defaults and filling in what it allocates: a field it
//     defaults or allocates (a port's protocol, targetPort, type,
//     sessionAffinity and its timeout, traffic policies, ipMode,
//     allocateLoadBalancerNodePorts, spec.clusterIPs from spec.clusterIP,
//     nodePort, healthCheckNodePort, a cluster IP) is checked only when
//     set. source/manifest applies those defaults first; objects from a
//     fake clientset often lack them, and the model applies the same
//     defaults.
//   - Which cluster IPs the cluster's service CIDRs allow, and its node
//     port range, are the API server's configuration: a cluster IP only
//     has to be an IP address, a node port a port number.
//   - There is no old object to compare with, so nothing an update alone
//     refuses (a changed cluster IP or address type) is refused. In
//     Stored mode the IP and CIDR fields that older versions validated
//     loosely accept what those versions stored (leading zeros,
//     IPv4-mapped and non-canonical IPv6), as the API server still serves
//     them.
//   - A Node's status (its addresses, which the API server does not check
//     either, and its resources) and the annotations kubelet reads, the
//     Kubernetes-specific rules on finalizer names, and an EndpointSlice
//     endpoint's reserved deprecatedTopology key are not checked: no proxy
//     reads them.
//
// Otherwise the same: a Service's status.loadBalancer is checked as a
// status update checks it (the API server drops a status given on create;
// a manifest carries what a cloud controller would write there), and an
// EndpointSlice's port numbers are not checked, as the API server does not
// check them (the trackers skip a port no proxy can use).
//
// Stricter: an EndpointSlice's endpoint addresses are refused at
// loopback, link-local and unspecified addresses in Stored mode too,
// where the API server would let an update through that leaves an older
// slice's endpoints as they were: a proxy must never forward to them.
package validation
