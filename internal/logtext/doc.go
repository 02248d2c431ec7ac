// Package logtext bounds the user-supplied strings that go into log lines.
//
// Names, addresses, annotation values and the errors that quote them come
// from objects anyone with write access to the API (or a manifest file)
// controls. Logged whole, one 64 KiB name makes a 64 KiB line per message
// and per sync. Every log call of the model packages (dataplane,
// servicemodel, endpoints) passes such values through this package, which
// keeps their start (enough to find the object) and marks the cut.
//
// The limits leave every valid Kubernetes name whole: the longest, a DNS
// subdomain, has 253 bytes.
package logtext
