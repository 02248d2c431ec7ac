// Package nfacct keeps the kernel's named packet counters (extended
// accounting, nfnetlink_acct): a rule with "-m nfacct --nfacct-name NAME"
// adds every packet it matches to counter NAME, which must exist before
// the rule is written. kube-proxy's iptables mode counts localhost node-port
// traffic this way, and exposes the counter as a metric.
//
// Client speaks netlink to the kernel through github.com/mdlayher/netlink.
// Counters belong to a network namespace: a Client works in the namespace
// of the thread that dialled it, whichever thread later uses it. A kernel
// built without nfnetlink_acct answers every call with an error wrapping
// ErrNotSupported, which is what callers branch on to leave their counting
// rules out. Fake keeps counters in memory, for tests and for dataplanes
// that must not touch the kernel.
package nfacct
