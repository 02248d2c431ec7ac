// Package manifest is a source.Source that serves the Services,
// EndpointSlices and Nodes of YAML or JSON files, so that a proxy runs
// without a cluster: a node agent's --manifests, a demo, a test.
//
// Decode reads one file's content; Source (New) reads a file or a folder,
// follows edits with fsnotify and hands the proxy the difference. A file
// that fails to decode is an *Error naming its path and line, and keeps its
// last good content.
//
// Objects are handed on as the API server would store them: every Service,
// EndpointSlice and Node gets the defaults the API server applies on create
// (a port's protocol TCP, an EndpointSlice port's name "", a Service's
// type, traffic policies, session affinity, target port and IP-family
// fields), so that a manifest written by hand means what it would mean
// applied with kubectl. Without that an unnamed EndpointSlice port would
// match no service port.
package manifest
