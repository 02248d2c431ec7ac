// Command vulncheck runs govulncheck over each of the repository's modules
// with an offline copy of the Go vulnerability database, and fails when
// any of them reaches a vulnerable symbol.
//
// The database's web service cannot be reached from CI, so the database is
// built from the golang.org/x/vulndb module, which the module proxy serves
// like any other: its data/osv folder holds every report as OSV JSON, and
// its own cmd/indexdb turns that folder into the layout govulncheck reads
// with -db file:///... (index/db.json, index/modules.json, ID/GO-*.json,
// each also gzipped). Both tools are tool lines of this module's go.mod,
// so the versions used are the ones pinned there and checked by go.sum;
// `go get golang.org/x/vulndb@latest` here is how the database is brought
// up to date. The built database is kept under the user's cache directory,
// keyed by that version, so that only a version bump rebuilds it.
//
// Run it from this folder (go tool needs this module), naming the modules
// to check relative to -C:
//
//	GOTOOLCHAIN=go1.27.3 go -C .ci/vulncheck run . -C "$PWD" . examples/nodeagent
//
// A module passes when govulncheck finds no vulnerable symbol that its code
// calls; vulnerabilities only in imported packages or required modules are
// counted, not failed on. A reachable finding with no fixed version
// anywhere can be accepted in accepted.txt, one line per module and ID
// with the reason it cannot harm; an acceptance that no longer matches a
// finding, or whose vulnerability has since been fixed, fails the check,
// so that the list never outlives its reason.
//
// Exit status: 0 when every module passes, 1 when one does not, 2 when the
// check itself could not run.
package main
