// Package xtables is the iptables toolkit proxykit's dataplanes share:
// the door to iptables-restore and iptables-save, a model of the tables
// that parses what they print and answers packets the way the kernel
// would, and a fake that stands in for the kernel in tests. It programs
// nothing of its own: the iptables dataplane (dataplane/iptables) writes
// all its rules through it, and the IPVS and userspace dataplanes their
// few helper rules; troubleshooting reads any program's rules with it.
//
// # Writing
//
// A Runner applies restore input (a RestoreInput, such as RestoreBytes)
// with iptables-restore --noflush, so only the chains named are touched
// and each table commits atomically; a rejected input is a *RestoreError
// quoting the lines around the one the kernel refused. Jumps from the
// built-in chains, which other programs share, are inserted and deleted
// one rule at a time (EnsureJump, DeleteJump) rather than restored.
// Cleanup goes one step further with iptables-nft, which hooks each
// built-in chain into the stack when its first rule arrives and never
// unhooks it: RemoveEmptyHooks deletes those a program jumped from once
// they are empty and accept, and the table once nothing is left in it.
// ExecRunner runs the iptables binaries (legacy or nft backend, whichever
// the node has); FakeRunner applies the same input to a Ruleset in memory.
//
// # Reading
//
// ParseSave turns iptables-save output into a Ruleset, leaving out (and
// returning) rules it cannot model, since other programs write matches
// proxykit never does. RuleKey compares rules by what they do rather than
// how they are spelled, because iptables-save lists a rule differently
// from how it was written (match order, /32, default options). A Reading
// (NewReading) is the listing of nat, filter and mangle that troubleshooting
// traces and lists the service ports of: the iptables dataplane's kernel
// reading, and the base of the userspace and IPVS dataplanes';
// NewReadingWithout leaves out one program's chains to show the others'.
//
// # Tracing
//
// Ruleset.Trace follows the first packet of a connection through mangle,
// nat and filter as the kernel would, including ipsets (SetIPSets) and
// TPROXY (an nfacct match, which only counts, matches every packet), and
// returns a dataplane.Verdict in the shape State.Lookup gives:
// so a fake can be held to the same conformance suite as a kernel, and
// "explain --kernel" can say what the kernel's rules do with a packet.
package xtables
