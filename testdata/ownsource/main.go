// Command ownsource is the smallest program built on proxykit: the root
// package, a source of its own and a dataplane of its own. deps_test.go
// lists what it links.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// printer is a dataplane that prints how many service ports it would
// program.
type printer struct{}

func (printer) Name() string { return "printer" }

func (printer) Sync(_ context.Context, s *dataplane.State) error {
	fmt.Println(s.Services.Len(), "service ports")
	return nil
}

func (printer) Cleanup(context.Context) error { return nil }

func main() {
	own := source.Func(func(ctx context.Context, h source.Handler) error {
		h.OnNode(nil, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
		h.Synced()
		<-ctx.Done()
		return nil
	})
	p, err := proxykit.New(proxykit.Config{
		NodeName:   "node-1",
		Sources:    []source.Source{own},
		Dataplanes: []proxykit.DataplaneConfig{{Dataplane: printer{}}},
	})
	if err == nil {
		err = p.RunOnce(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
