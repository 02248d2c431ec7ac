// Command nodeagent is a kube-proxy replacement built only on proxykit's
// public API: it watches a cluster (or manifest files, or its bundled demo
// manifests), programs iptables or nftables, cleans conntrack, and serves
// kube-proxy's health and metrics endpoints.
//
// With no flags it prints the rules it would program for the demo
// manifests and exits:
//
//	go -C examples/nodeagent run .
//
// `nodeagent explain SRC DST:PORT/PROTO` answers where a packet goes and
// why, from the same model the rules are built from; `diagnose`, `verify`
// and `list` answer why a Service does not, compare the kernel's rules
// with the model and list the frontends. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
