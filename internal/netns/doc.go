// Package netns is the test harness for everything that touches netfilter or
// links: each test creates its own network namespaces (never touching the
// machine's own), wires them with veth pairs, and deletes them when it ends.
//
// Tests that need root or a kernel feature call Require first: it skips the
// test with the reason, unless PROXYKIT_REQUIRE_KERNEL=1 is set (as CI sets
// it), in which case a missing feature fails the test.
package netns
