// Package build makes every program the e2e fixture runs, from Go modules
// alone, so that a machine with Go, Debian's packages and a module proxy
// needs nothing else: no release downloads, no container registry.
//
// The Kubernetes components, etcd, agnhost and the ginkgo CLI come from
// this module's tool lines, so the versions are the ones go.mod pins and
// go.sum checks, and e2e.test from k8s.io/kubernetes/test/e2e at the same
// version. They are built once into a cache directory named by the
// versions (DefaultCacheDir): a cold build is about half an hour on two
// cores, and nothing but a version bump should pay it again. A flock makes
// a second run wait for the first instead of building the same binaries
// twice, and every binary is written under a temporary name and renamed,
// so that a killed build leaves nothing a later run would trust. All are
// static (CGO_ENABLED=0): the agnhost and pause binaries go into images
// without a libc, and the others run inside namespaces with their own
// mounts. The version ldflags matter: without them kubelet and kubectl
// report v0.0.0, which the e2e framework's version checks reject.
//
// CoreDNS is installed with go install github.com/coredns/coredns@VERSION
// rather than as a tool line: its own go.mod then pins its dependencies,
// which are newer than Kubernetes' in places, and adding it to this
// module's graph would move the versions the Kubernetes build relies on.
//
// The node agent and the pause program are built on every call: they
// change with the checkout, and with the go build cache a rebuild is a
// link. They go to a run directory per checkout, so two checkouts sharing
// the cache never swap binaries under each other.
//
// go test -c of a dependency's package needs that package's test imports
// in this module's graph, and go mod tidy keeps only what this module's own
// packages import. tools.go blank-imports those test imports behind the
// "tools" build tag: tidy reads every build tag, while go build, go vet
// and go test never compile the file, so go vet ./... stays fast. (A tool
// line cannot do it: e2e is not a main package.)
package build
