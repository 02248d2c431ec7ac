// Package backend is the plumbing every dataplane backend (iptables,
// nftables, ipvs, userspace) shares, so that a fix to it is made once: the
// checks of the Config fields they have in common (IP family, masquerade
// bit, render workers), the check that a State is one the backend can
// program (its Settings included), the one way the detector's interface
// is written into a rule, the report of inputs left out as invalid, the read of the last
// sync's statistics, and the registration of metrics that both families'
// Dataplanes may share on one Registerer.
//
// Each function takes the backend's name ("iptables", ...) to prefix its
// errors, so that users read the same messages as before the plumbing was
// shared. The backends' exported API stays their own; nothing here is
// visible outside the dataplane tree.
package backend
