// Package sysctl reads and writes the kernel settings dataplanes depend
// on (route_localnet, nf_conntrack_tcp_be_liberal, the IPVS and ARP
// settings), behind an interface small enough to fake.
//
// Proc works on /proc/sys. Settings under net/ belong to a network
// namespace: the files are opened by the calling OS thread, so a Proc used
// on a thread inside a namespace reads and writes that namespace's copy.
// Fake keeps settings in memory, for tests and for dataplanes that must
// not touch the kernel.
package sysctl
