// Package manifest is a source.Source that serves the Services,
// EndpointSlices and Nodes of YAML or JSON files, so that a proxy runs
// without a cluster: a node agent's --manifests, a demo, a test.
//
// Decode reads one file's content; Source (New) reads a file or a folder,
// follows edits with fsnotify and hands the proxy the difference. A file
// that fails to decode is an *Error naming its path and line, and keeps its
// last good content.
package manifest
