// Package images writes the container images the upstream e2e suite pulls,
// without a registry: the fixture's nodes have no route to one, and the
// suite's tests must not depend on anything outside the machine.
//
// Each image is assembled with go-containerregistry (an empty image plus
// layers) and written as a docker-save tarball, which `ctr -n k8s.io images
// import` reads, under the exact reference the suite's image manifest
// names, so that kubelet finds it present and never pulls. Besides pause
// and agnhost, the Conntrack and KubeProxy tests pull busybox,
// distroless-iptables and the regression-issue-74839 server; the first two
// are only the tools layer under another name, so they cost nothing.
//
// agnhost alone is not what the suite runs: its tests exec shell snippets
// in pods (`/bin/sh -x -c` with nc -v, curl, wget, nslookup). The tools
// layer takes those from the machine's Debian packages rather than
// building them: busybox-static for the small tools, dash as /bin/sh
// (busybox's sh runs its own nc, which rejects -v), OpenBSD nc, curl and
// GNU wget (busybox's wget crashed in the trial), and conntrack for the
// KubeProxy test. Their shared libraries and the loader are found the way
// the loader finds them, from each ELF file's PT_INTERP and DT_NEEDED
// entries, rather than by parsing ldd, which runs the program.
//
// Layers are built in memory with fixed mtimes, so the same inputs give
// the same digests; each tarball's key (its config and its layers'
// uncompressed digests) is stored beside it, and a tarball whose key is
// unchanged is kept, which spares compressing ~100 MB on every run.
package images
