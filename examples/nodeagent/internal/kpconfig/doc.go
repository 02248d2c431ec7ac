// Package kpconfig reads kube-proxy's configuration file, a
// KubeProxyConfiguration of kubeproxy.config.k8s.io/v1alpha1, the way
// kube-proxy v1.37 does: decoded through apimachinery's serializer (strict,
// falling back to lenient decoding with a warning, as upstream does for
// v1alpha1), defaulted with kube-proxy's defaults and validated with its
// rules, errors naming the field by its path in the file.
//
// Only the node agent imports it; the proxykit library never does, so
// that a program built on the library alone does not need
// k8s.io/kube-proxy.
package kpconfig
