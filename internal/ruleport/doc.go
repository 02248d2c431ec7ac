// Package ruleport checks a service port before a dataplane writes it into
// kernel rules: names that fit in rule comments and object names, a
// protocol the kernel matches, addresses of the dataplane's family. What
// cannot be written is reported, never passed to the kernel, and the
// iptables and nftables dataplanes refuse exactly the same inputs.
package ruleport
