// Package pmap is a persistent (immutable, structurally shared) hash map: a
// hash array mapped trie with 32-way branching.
//
// The trackers hand out snapshots that must stay valid while the next changes
// are applied, and applying K changes must cost O(K), not O(cluster). Copying a
// Go map per snapshot is O(cluster); Set and Delete here copy only the path to
// the changed key (at most 13 nodes of at most 32 entries), so a snapshot is a
// value copy of Map and a change costs O(log32 n).
package pmap
