package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/examples/customdataplane"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const (
	nodeName  = "node-a"
	clusterIP = "10.96.0.10"
	frontend  = clusterIP + ":80/TCP"
)

// TestEmbed runs the agent's informers against client-go's fake clientset
// and follows a service through both dataplanes as its objects change:
// iptables through its fake, and through the real iptables of a network
// namespace the test creates.
func TestEmbed(t *testing.T) {
	t.Run("iptables fake", func(t *testing.T) {
		fr := xtables.NewFakeRunner()
		testEmbed(t, func(ctx context.Context, serve func(xtables.Runner) error) error { return serve(fr) },
			func() string { b, _ := fr.Save(t.Context(), "nat"); return string(b) })
	})
	t.Run("iptables in a namespace", func(t *testing.T) {
		netns.Require(t, "iptables-restore", "iptables-save")
		ns := netns.New(t, "embed")
		testEmbed(t, func(ctx context.Context, serve func(xtables.Runner) error) error {
			// The dataplanes are programmed from the goroutine that
			// serves, here on a thread inside the namespace.
			return ns.Do(func() error {
				r, err := xtables.NewExecRunner(xtables.ExecConfig{})
				if err != nil {
					return err
				}
				return serve(r)
			})
		}, func() string { return ns.MustRun("iptables-save", "-t", "nat") })
	})
}

// testEmbed runs the agent through start, which calls serve with the
// iptables Runner, and reads the nat rules through rules.
func testEmbed(t *testing.T, start func(context.Context, func(xtables.Runner) error) error, rules func() string) {
	ctx, cancel := context.WithCancel(t.Context())
	client := fake.NewClientset(node(), service(), slice("10.244.1.5", "10.244.2.9"))
	agents := make(chan *agent, 1)
	done := make(chan error, 1)
	go func() {
		done <- start(ctx, func(r xtables.Runner) error {
			a, err := newAgent(nodeName, r, logr.Discard())
			if err != nil {
				return err
			}
			agents <- a
			return a.serve(ctx, client)
		})
	}()
	var a *agent
	select {
	case a = <-agents:
	case err := <-done:
		t.Fatalf("the agent stopped before it started: %v", err)
	}

	steps := []struct {
		name   string
		change func() error
		want   []string // the backends of the cluster IP in the table
	}{
		{"synced", func() error { return nil }, []string{"10.244.1.5:8080", "10.244.2.9:8080"}},
		{"endpoint removed", func() error {
			_, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice("10.244.2.9"), metav1.UpdateOptions{})
			return err
		}, []string{"10.244.2.9:8080"}},
		{"service deleted", func() error {
			return client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{})
		}, nil},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var got []string
		var nat string
		// The informers deliver asynchronously: look until both
		// dataplanes agree with the step, a bounded number of times.
		for range 200 {
			got, nat = backends(t, a.table), rules()
			if slices.Equal(got, s.want) && natAgrees(nat, s.want) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if d := cmp.Diff(s.want, got); d != "" {
			t.Errorf("%s: backends of %s in the custom dataplane's table (-want +got):\n%s", s.name, frontend, d)
		}
		if !natAgrees(nat, s.want) {
			t.Errorf("%s: iptables nat table does not DNAT %s to exactly %v:\n%s", s.name, clusterIP, s.want, nat)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// natAgrees reports whether the nat rules send the cluster IP to exactly
// the backends want (and mention it not at all when there are none).
func natAgrees(nat string, want []string) bool {
	if len(want) == 0 {
		return !strings.Contains(nat, clusterIP)
	}
	for _, ep := range []string{"10.244.1.5:8080", "10.244.2.9:8080"} {
		if strings.Contains(nat, "--to-destination "+ep) != slices.Contains(want, ep) {
			return false
		}
	}
	return strings.Contains(nat, "-d "+clusterIP)
}

// backends reads the table over HTTP, as a datapath's loader would.
func backends(t *testing.T, dp *customdataplane.Dataplane) []string {
	rec := httptest.NewRecorder()
	dp.ServeHTTP(rec, httptest.NewRequest("GET", "/table", nil))
	var table customdataplane.Table
	if err := json.Unmarshal(rec.Body.Bytes(), &table); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range table.Frontends[frontend] {
		for _, b := range e.Other.Backends {
			out = append(out, b.String())
		}
	}
	return out
}

func node() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.2"}}},
	}
}

func service() *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
}

func slice(ips ...string) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-1", Namespace: "default",
			Labels: map[string]string{discovery.LabelServiceName: "web"},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(v1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		netip.MustParseAddr(ip)
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{ip},
			Conditions: discovery.EndpointConditions{Ready: ptr(true)},
			NodeName:   ptr("node-b"),
		})
	}
	return s
}

func ptr[T any](v T) *T { return &v }
