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
//
// Then every object is checked as the API server checks one it is asked to
// create (source/validation), in its own words and field paths. One it
// would refuse (a 200-character Service name, port 0, an endpoint at
// 127.0.0.1 or 169.254.169.254, a 257 KiB annotation) is left out and the
// rest of the file is still served: Decode returns it as an *Error beside
// the valid objects; a Source logs it at the default level with the file
// and line of its document and counts it in
// proxykit_source_objects_refused_total{source="manifests", kind} on
// Config.Registerer, once per edit of the document. An object edited into
// one the API server would refuse is removed, not kept at its last valid
// version: what is served is what the files say now, whatever happened
// before, so a restart never serves something else.
package manifest
