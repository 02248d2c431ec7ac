// Package source defines how Kubernetes objects reach a proxy: a Source
// runs until its context ends and hands Services, EndpointSlices and Nodes
// to a Handler, which the proxy implements.
//
// This package is deliberately small and depends only on k8s.io/api and
// apimachinery, so that a program feeding the proxy from its own source
// (Static, a Func, or its own type) links nothing more. The built-in
// sources live in sub-packages a program imports only if it uses them:
// source/informer watches a cluster through client-go, source/manifest
// serves YAML or JSON files.
package source
