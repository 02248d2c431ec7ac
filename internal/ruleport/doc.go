// Package ruleport checks a service port before a dataplane writes it into
// kernel rules: names that fit in rule comments and object names, a
// protocol the kernel matches, addresses of the dataplane's family. What
// cannot be written is reported, never passed to the kernel, and the
// iptables, nftables and IPVS dataplanes refuse exactly the same inputs.
//
// It refuses only what the API server refuses or a rule cannot hold. A
// namespace, service name or port name may have up to 63 characters, the
// API server's limit on each; a port name in particular is a DNS label, not
// a container port's 15-character IANA name. Within that limit every name
// is served: the iptables dataplane's comments fit in the 255 bytes
// xt_comment holds, and the nftables dataplane hashes the object names and
// shortens the comments that would not fit. The characters are those
// servicemodel.ValidName admits, which nothing in a rule comment or an
// nftables name treats specially.
package ruleport
