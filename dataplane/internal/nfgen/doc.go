// Package nfgen reads the nftables ruleset generation: the number the
// kernel moves with every committed nftables transaction in a network
// namespace, whoever made it. iptables-nft commits through nftables too,
// so the generation tells a dataplane in one netlink round trip whether
// anyone changed any rule since it last looked, and only then need it
// list its own. It is shared by the dataplanes that poll it (no dataplane
// imports another).
package nfgen
