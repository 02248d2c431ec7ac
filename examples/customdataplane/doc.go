// Package customdataplane is a vendor's own dataplane built on proxykit, in
// the shape an eBPF or OVS dataplane has: the control plane fills tables, a
// datapath reads them for each new connection. Here the table is a Go map
// served as JSON over HTTP (Dataplane.ServeHTTP), and the datapath is
// modelled in the package's conformance test.
//
// Sync turns each dataplane.State into the table in O(changes): it asks
// State.ChangedFrom which services changed since the State it last
// programmed and rewrites only their entries, and programs everything when
// the State cannot tell (the first Sync, after Cleanup). Which endpoints
// serve which traffic comes from State.Select, never from code of its own;
// the Dataplane decides per class of client (a local pod, the node, anyone
// else) so that the datapath only classifies the packet and reads the
// answer.
//
// The package passes dataplanetest.Run, the conformance suite every
// proxykit dataplane passes. Its README is the tutorial "write your own
// dataplane", which builds it step by step.
package customdataplane
