package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// scale is the number of services (each with 10 endpoints) the scale test
// creates.
func scale() int {
	if testing.Short() {
		return 1000
	}
	return 10000
}

// TestScale creates 10,000 services × 10 endpoints through the API, then
// starts one agent: time to its first full sync, its RSS, and the latency
// of one endpoint change afterwards. The agent runs in nftables mode, the
// one the agent recommends at this size: where iptables is the nf_tables
// backend (Debian's default), a first restore of 100,000 endpoints takes
// minutes.
func TestScale(t *testing.T) {
	bins, agent := binaries(t)
	lab := NewLab(t, bins, agent, LabConfig{Nodes: 2, PodsPerNode: 2, NoAgents: true})
	count := scale()
	start := time.Now()
	createServices(t, lab, 0, count)
	record(t, fmt.Sprintf("scale: created %d services × 10 endpoints through the API in %v", count, time.Since(start).Round(time.Second)))

	n := lab.Nodes[0]
	agentStart := time.Now()
	n.StartAgent("--proxy-mode=nftables", "--iptables-min-sync-period=0")
	ports := waitFirstSync(t, n, count, 5*time.Minute)
	firstSync := time.Since(agentStart)
	rss, err := n.RSS()
	if err != nil {
		t.Fatal(err)
	}
	record(t, fmt.Sprintf("scale: %d services × 10 endpoints, one agent (nftables): first full sync %v after start, %v service ports programmed, RSS %d MiB",
		count, firstSync.Round(10*time.Millisecond), ports, rss>>20))
	d, _ := measureChanges(t, lab, "probe", 20)
	report(t, fmt.Sprintf("endpoint change → rule with %d services, min-sync-period 0", count), d)
	if rss, err = n.RSS(); err == nil {
		record(t, fmt.Sprintf("scale: agent RSS after the changes %d MiB", rss>>20))
	}
}

// createServices creates services scale<from> to scale<to-1>, each with
// scaleSlice's 10 endpoints, through the API from 16 writers.
func createServices(t *testing.T, lab *Lab, from, to int) {
	t.Helper()
	ctx := context.Background()
	c := lab.CP.Admin
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				svc, err := c.CoreV1().Services(Namespace).Create(ctx, NewService(fmt.Sprintf("scale%d", i), 80), metav1.CreateOptions{})
				if err == nil {
					err = WriteSlice(ctx, c, scaleSlice(svc.Name, i))
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// waitFirstSync waits until n's agent has made its first full sync with at
// least services service ports programmed, and returns how many are.
func waitFirstSync(t *testing.T, n *Node, services int, timeout time.Duration) float64 {
	t.Helper()
	// The sync-duration histogram counts a dataplane's sync as it ends; the
	// programmed-ports gauge is set once every family's dataplane synced,
	// so the first sync is over when both say so.
	var ports float64
	eventually(t, timeout, "first full sync", func() error {
		v, err := n.Metric("kubeproxy_sync_full_proxy_rules_duration_seconds_count")
		if err == nil && v < 1 {
			err = fmt.Errorf("no full sync yet")
		}
		if err == nil {
			if ports, err = n.Metric("proxykit_programmed_service_ports"); err == nil && ports < float64(services) {
				err = fmt.Errorf("%v of %d service ports programmed", ports, services)
			}
		}
		return err
	})
	return ports
}

// scaleSlice is service i's slice of 10 endpoints at addresses nothing
// serves (172.16.0.0/12): the test measures programming, not traffic.
func scaleSlice(service string, i int) *discovery.EndpointSlice {
	s := NewSlice(NewService(service, 80))
	base := netip.MustParseAddr("172.16.0.0").As4()
	for j := range 10 {
		v := uint32(i*10 + j)
		a := base
		a[1] += byte(v >> 16)
		a[2] = byte(v >> 8)
		a[3] = byte(v)
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{netip.AddrFrom4(a).String()},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To("node1"),
		})
	}
	return s
}
