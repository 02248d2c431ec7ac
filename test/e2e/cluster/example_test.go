package cluster_test

import (
	"context"
	"log"
	"os"

	"github.com/proxykit/proxykit/test/e2e/build"
	"github.com/proxykit/proxykit/test/e2e/cluster"
	"github.com/proxykit/proxykit/test/e2e/images"
)

// A three-node cluster with the node agent in nftables mode, and kubectl
// run from the runner namespace against it. (Not run by go test: it needs
// root and half an hour of builds.)
func Example() {
	ctx := context.Background()
	bins, err := build.Build(ctx, build.Options{Log: os.Stderr})
	if err != nil {
		log.Fatal(err)
	}
	imgs, err := images.Build(ctx, "/tmp/e2e-images", bins)
	if err != nil {
		log.Fatal(err)
	}
	c, err := cluster.Up(ctx, cluster.Config{Nodes: 3, Bin: bins, Images: imgs, WorkDir: "/tmp/e2e-cluster", Log: os.Stderr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Down(ctx)
	if err := c.StartProxy(ctx, cluster.Proxy{Name: "proxykit", Binary: bins.Agent, Mode: "nftables"}); err != nil {
		log.Fatal(err)
	}
	kubectl := c.Command(ctx, bins.Kubectl, "--kubeconfig", c.Kubeconfig(), "get", "nodes", "-o", "wide")
	kubectl.Stdout, kubectl.Stderr = os.Stdout, os.Stderr
	if err := kubectl.Run(); err != nil {
		log.Fatal(err)
	}
	if err := c.StopProxy(ctx); err != nil {
		log.Fatal(err)
	}
}
