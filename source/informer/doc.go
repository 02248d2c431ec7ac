// Package informer is a source.Source that watches a cluster through
// client-go informers, filtered on the API server as kube-proxy filters
// them (see Source).
//
// It takes a Client (a clientset's core/v1 and discovery/v1 typed clients)
// rather than kubernetes.Interface, and builds its informers from those
// typed clients rather than through client-go's informer factories, so
// that only what it watches is linked in.
//
// When the Client also has a networking/v1 client (every
// kubernetes.Interface has) and the Handler is a
// source.ServiceCIDRHandler, the source watches ServiceCIDR objects too,
// as kube-proxy does; Synced never waits for them.
//
// # Objects no API server would send
//
// Every Service, EndpointSlice, Node and ServiceCIDR is checked as the API server
// checks what it stores (source/validation, Stored mode) before it is
// handed on: a fake clientset, an aggregated or buggy server, or an object
// written to etcd directly can send what a real API server would have
// refused, such as an endpoint at 127.0.0.1 or 169.254.169.254. Such an
// object is handled as absent (an update to it removes the version handed
// on before, a later valid version is added again), logged at the default
// level with the API server's own field errors, and counted in
// proxykit_source_objects_refused_total{source="informers", kind} on
// Config.Registerer. Each change costs one validation of the object
// changed; a resync is not checked again.
//
// # Differences from kube-proxy
//
// kube-proxy trusts the API server and programs whatever it is sent; this
// source refuses, as above, what the API server itself would refuse.
//
// With Config.ProxyName set, the source watches services labelled with
// that name as well as unlabelled ones (two label selectors, merged), so
// that a second proxy can claim services by label.
//
// While the API server is unreachable (or answers 429, 500, 503 or 504)
// the source retries each list and watch itself, at most Config.RetryMax
// apart, instead of letting client-go's reflector back off for up to a
// minute: after an API server restart, changes arrive within about
// RetryMax of its readiness. When the server forbids a list or watch, the
// source logs once which verb on which resource it lacks, and waits.
package informer
