package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ChurnEnv sets the length of TestChurn's churn (a Go duration, at least
// a minute, e.g. 1h); unset, the churn lasts 90 seconds.
const ChurnEnv = "PROXYKIT_CLUSTER_CHURN"

// churnModes are the modes TestChurn runs, one agent each, on nodes 0, 1
// and 2.
var churnModes = []string{"iptables", "nftables", "userspace"}

// churnPlan is how long and how hard TestChurn churns.
type churnPlan struct {
	// duration of the churn; samples before warmup are shown but not
	// fitted; one every sample.
	duration, warmup, sample time.Duration
	// rate is the model's changes per second.
	rate float64
	// services is how many services the model keeps.
	services int
	// settle is how long a service must have been left alone before a
	// probe of it counts: several of the agents' minimum sync period
	// (1s), so that a probe never races a change.
	settle time.Duration
	// shortTimeWait lowers the nodes' conntrack TIME_WAIT timeout (120s)
	// to 10s, so that the conntrack count reaches its level within a
	// warm-up shorter than that timeout.
	shortTimeWait bool
}

func planChurn(t *testing.T) churnPlan {
	p := churnPlan{duration: 90 * time.Second, rate: 20, services: 1000, settle: 5 * time.Second}
	if v := os.Getenv(ChurnEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			t.Fatalf("%s=%q: want a duration of at least 1m", ChurnEnv, v)
		}
		p.duration = d
		// Setup (1,000 services through the API, three first syncs)
		// and the final comparison take a few minutes on a busy
		// machine: say so now rather than time out at the end.
		if dl, ok := t.Deadline(); ok && time.Until(dl) < d+15*time.Minute {
			t.Fatalf("%s=%v needs -timeout of at least %v", ChurnEnv, d, (d + 15*time.Minute).Round(time.Minute))
		}
	}
	p.warmup = min(10*time.Minute, p.duration/3)
	p.sample = min(time.Minute, max(5*time.Second, p.duration/20))
	p.shortTimeWait = p.warmup < 3*time.Minute
	return p
}

// TestChurn runs one agent per mode (iptables, nftables, userspace) on a
// node each, under a bounded churn of 1,000 services (endpoints turning
// ready and not, added and removed; services deleted and created) at 20
// changes per second, with traffic probed from a pod on every node
// throughout. Every probe of a service left alone for a while must be
// answered as the model says (within a minute of its last change: one
// answered so late is counted apart); each agent's RSS, goroutines and
// open files, its node's conntrack entries and kernel objects, sampled
// throughout, must not grow after warm-up (least-squares fit, bounds at
// agentSeries); after the churn every service answers as the model says
// from every node, and each node's kernel state is the one a fresh agent
// of the same mode programs for the same objects, read in canonical
// form. 90 seconds of churn by default; PROXYKIT_CLUSTER_CHURN=1h for an
// hour (with -timeout 80m).
func TestChurn(t *testing.T) {
	plan := planChurn(t)
	Require(t, "conntrack", "nft", "ss")
	// The xtables lock is one file for the whole machine, every network
	// namespace's iptables runs included: another test's long restore
	// would stall these agents' (10 s was seen). The lab's nodes are
	// hosts of their own; their agents (and the iptables they run)
	// share a lock of the lab's.
	t.Setenv("XTABLES_LOCKFILE", filepath.Join(t.TempDir(), "xtables.lock"))
	bins, agent := binaries(t)
	lab := NewLab(t, bins, agent, LabConfig{Nodes: len(churnModes), PodsPerNode: 2, NoAgents: true})
	ctx := context.Background()
	var pods []*Pod
	for _, n := range lab.Nodes {
		pods = append(pods, n.Pods...)
	}
	for _, n := range lab.Nodes {
		// A probe of a service without endpoints must meet the agent's
		// REJECT, which a node without a route to the service range
		// never reaches: routing fails first, and its ICMP errors are
		// limited to one a second per client. REJECT's own are limited
		// by icmp_ratelimit: a probe that got none would wait for its
		// timeout.
		n.NS.MustRun(t, "ip", "route", "add", ServiceCIDR, "dev", "eth0")
		n.NS.MustRun(t, "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0")
	}
	m := &churnModel{c: lab.CP.Admin, pods: pods, rng: rand.New(rand.NewPCG(1, 2))}
	start := time.Now()
	if err := m.populate(ctx, plan.services); err != nil {
		t.Fatal(err)
	}
	record(t, fmt.Sprintf("churn: %d services created through the API in %v", plan.services, time.Since(start).Round(time.Second)))
	for i, n := range lab.Nodes {
		n.StartAgent("--proxy-mode=" + churnModes[i])
	}
	for i, n := range lab.Nodes {
		waitFirstSync(t, n, plan.services, 5*time.Minute)
		if plan.shortTimeWait {
			n.NS.MustRun(t, "sysctl", "-qw", "net.netfilter.nf_conntrack_tcp_timeout_time_wait=10")
		}
		record(t, fmt.Sprintf("churn: %s agent (%s) synced %d services", n.Name, churnModes[i], plan.services))
	}

	run := runChurn(t, lab, m, plan)
	run.report(t, lab, plan)
	for _, n := range lab.Nodes {
		if n.AgentExited() {
			t.Fatalf("%s: agent exited during the churn", n.Name)
		}
	}
	finalCheck(t, lab, m)
	for i, n := range lab.Nodes {
		compareFresh(t, n, churnModes[i], plan.services)
	}
}

// churnModel is what the test wrote through the API, which the agents
// must program: services, each with up to three endpoints (pods, one per
// node), ready or not.
type churnModel struct {
	c    kubernetes.Interface
	pods []*Pod

	mu   sync.Mutex
	rng  *rand.Rand
	live []*churnService
	seq  int
}

// churnService is one service of the model.
type churnService struct {
	name  string
	svc   *v1.Service
	slice *discovery.EndpointSlice
	cands [3]*Pod
	in    [3]bool
	ready [3]bool
	// busy is set while a change of the service is being written: no
	// probe of it counts then.
	busy bool
	// written is when its last change was written; version counts them.
	written time.Time
	version int
}

// serving is the names of the pods the model says serve s.
func (s *churnService) serving() []string {
	var out []string
	for i, p := range s.cands {
		if s.in[i] && s.ready[i] {
			out = append(out, p.Name)
		}
	}
	return out
}

// endpoints is s's slice endpoints: ready ones as the EndpointSlice
// controller writes them, the others neither ready nor serving.
func (s *churnService) endpoints() []discovery.Endpoint {
	var out []discovery.Endpoint
	for i, p := range s.cands {
		if !s.in[i] {
			continue
		}
		e := PodEndpoint(p)
		if !s.ready[i] {
			e.Conditions = discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(false)}
		}
		out = append(out, e)
	}
	return out
}

// newService makes the model's next service (not yet written): every
// tenth a NodePort, each of its three candidate pods (one per node) an
// endpoint with probability 1/2 and ready with 1/2. Called with mu held.
func (m *churnModel) newService() *churnService {
	i := m.seq
	m.seq++
	s := &churnService{name: "churn" + strconv.Itoa(i)}
	for k := range s.cands {
		s.cands[k] = m.pods[(i+2*k)%len(m.pods)]
		s.in[k], s.ready[k] = m.rng.IntN(2) == 0, m.rng.IntN(2) == 0
	}
	s.svc = NewService(s.name, 80)
	if i%10 == 0 {
		s.svc.Spec.Type = v1.ServiceTypeNodePort
	}
	return s
}

// create writes s's service and slice.
func (m *churnModel) create(ctx context.Context, s *churnService) error {
	svc, err := m.c.CoreV1().Services(Namespace).Create(ctx, s.svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("service %s: %w", s.name, err)
	}
	slice := NewSlice(svc)
	slice.Endpoints = s.endpoints()
	out, err := m.c.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("endpointslice %s: %w", slice.Name, err)
	}
	s.svc, s.slice, s.written = svc, out, time.Now()
	return nil
}

// populate creates count services from 16 writers.
func (m *churnModel) populate(ctx context.Context, count int) error {
	svcs := make([]*churnService, count)
	for i := range svcs {
		svcs[i] = m.newService()
	}
	work := make(chan *churnService)
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for s := range work {
				if first.Load() != nil {
					continue
				}
				if err := m.create(ctx, s); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for _, s := range svcs {
		work <- s
	}
	close(work)
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	m.live = svcs
	return nil
}

// pick marks a random service that no change is being written to busy
// and returns it; nil when all are.
func (m *churnModel) pick() *churnService {
	m.mu.Lock()
	defer m.mu.Unlock()
	for range 10 {
		s := m.live[m.rng.IntN(len(m.live))]
		if !s.busy {
			s.busy = true
			return s
		}
	}
	return nil
}

// change makes one change to busy s and writes it: a flip of an
// endpoint's readiness (45%), an endpoint added or removed (45%), or the
// service replaced by a new one (10%). It returns the API writes made and
// whether s was replaced.
func (m *churnModel) change(ctx context.Context, s *churnService) (writes int, replaced bool, err error) {
	m.mu.Lock()
	op, k, ready := m.rng.Float64(), m.rng.IntN(3), m.rng.IntN(2) == 0
	m.mu.Unlock()
	if op >= 0.9 {
		return m.replace(ctx, s)
	}
	in, rd := s.in, s.ready
	if op < 0.45 && slices.Contains(in[:], true) {
		for !in[k] {
			k = (k + 1) % 3
		}
		rd[k] = !rd[k]
	} else {
		in[k], rd[k] = !in[k], ready
	}
	next := *s
	next.in, next.ready = in, rd
	slice := s.slice.DeepCopy()
	slice.Endpoints = next.endpoints()
	out, err := m.c.DiscoveryV1().EndpointSlices(Namespace).Update(ctx, slice, metav1.UpdateOptions{})
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		// What the API holds is unknown now: s stays busy, never probed.
		return 1, false, fmt.Errorf("endpointslice %s: %w", slice.Name, err)
	}
	s.in, s.ready, s.slice = in, rd, out
	s.written, s.version, s.busy = time.Now(), s.version+1, false
	return 1, false, nil
}

// replace deletes busy s and creates a new service in its place.
func (m *churnModel) replace(ctx context.Context, s *churnService) (int, bool, error) {
	if err := Delete(ctx, m.c, s.name); err != nil {
		return 2, false, err
	}
	m.mu.Lock()
	i := slices.Index(m.live, s)
	next := m.newService()
	next.busy = true
	m.live[i] = next
	m.mu.Unlock()
	err := m.create(ctx, next)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		return 4, true, err
	}
	next.busy = false
	return 4, true, nil
}

// probeSample returns up to n random services left alone for at least
// settle, each with its version and the pods that should serve it.
func (m *churnModel) probeSample(n int, settle time.Duration) []probeCase {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []probeCase
	now := time.Now()
	for range 4 * n {
		if len(out) == n {
			break
		}
		s := m.live[m.rng.IntN(len(m.live))]
		if s.busy || now.Sub(s.written) < settle {
			continue
		}
		out = append(out, probeCase{s: s, version: s.version, written: s.written, addr: ClusterAddr(s.svc), want: s.serving()})
	}
	return out
}

// unchanged reports whether no change of pc's service began since the
// case was taken.
func (m *churnModel) unchanged(pc probeCase) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !pc.s.busy && pc.s.version == pc.version
}

// probeCase is one service to probe and what the model said of it.
type probeCase struct {
	s       *churnService
	version int
	written time.Time
	addr    string
	want    []string
}

// check connects once from p and compares the answer with the model's:
// one of the serving pods, or no answer when none serves.
func (pc probeCase) check(p *Pod, timeout time.Duration) error {
	got, err := p.Get(pc.addr, timeout)
	switch {
	case len(pc.want) == 0 && err == nil:
		return fmt.Errorf("from %s to %s (%s): served by %s, want no answer", p.Name, pc.addr, pc.s.name, got)
	case len(pc.want) > 0 && err != nil:
		return fmt.Errorf("from %s to %s (%s): %v, want one of %v", p.Name, pc.addr, pc.s.name, err, pc.want)
	case len(pc.want) > 0 && !slices.Contains(pc.want, got):
		return fmt.Errorf("from %s to %s (%s): served by %s, want one of %v", p.Name, pc.addr, pc.s.name, got, pc.want)
	}
	return nil
}

// stats counts the model's services, endpoints and ready endpoints,
// sampled beside the agents' series: what their kernel objects follow.
func (m *churnModel) stats() (services, endpoints, ready int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.live {
		for k := range s.cands {
			if s.in[k] {
				endpoints++
				if s.ready[k] {
					ready++
				}
			}
		}
	}
	return len(m.live), endpoints, ready
}
