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
// # Differences from kube-proxy
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
