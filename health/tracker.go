package health

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// ToBeDeletedTaint is the taint the cluster autoscaler puts on a node it is
// about to delete; /healthz fails on such a node so that load balancers
// drain it first.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// Report is the proxy's health, in kube-proxy's /healthz and /livez JSON
// shape.
type Report struct {
	// LastUpdated is the latest successful sync of any family. The HTTP
	// handlers report the current time instead while healthy, as
	// kube-proxy does for compatibility with older clients.
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// NodeEligible is set only in /healthz answers.
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Healthy is true when every family is.
	Healthy bool                         `json:"healthy"`
	Status  map[v1.IPFamily]FamilyStatus `json:"status,omitempty"`
	// Drift names each dataplane whose kernel objects someone else
	// changed and that has not repaired them yet (Tracker.Drifted), by
	// family then dataplane. /healthz fails while it is not empty;
	// kube-proxy has no such field.
	Drift []Drift `json:"drift,omitempty"`
}

// Drift is one dataplane's known, unrepaired drift.
type Drift struct {
	IPFamily  v1.IPFamily `json:"ipFamily"`
	Dataplane string      `json:"dataplane"`
	// Since is when the drift was first reported.
	Since time.Time `json:"since"`
}

// FamilyStatus is the health of one IP family's dataplanes.
type FamilyStatus struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// Tracker tracks, per family, the last successful sync and the oldest
// change still waiting for one, and answers /healthz and /livez from them
// (kube-proxy's ProxyHealthServer). Its methods may be called from any
// goroutine.
//
// A sync loop calls Queued for each change, Syncing when a sync takes its
// snapshot of the changes, and Synced for each family the sync programmed.
// A family is unhealthy once a change has waited the timeout without a
// sync that carried it succeeding: a failed sync leaves its changes owed,
// and a change that arrives while a sync runs is owed by the next one.
type Tracker struct {
	clock    clock.PassiveClock
	timeout  time.Duration
	nodeName string

	mu          sync.RWMutex
	lastUpdated map[v1.IPFamily]time.Time
	// queued is the oldest change no sync has carried yet; carried the
	// oldest change carried by syncs that have not succeeded yet.
	queued  map[v1.IPFamily]time.Time
	carried map[v1.IPFamily]time.Time
	// drift is when each dataplane (by family and name) reported drift
	// it has not repaired yet.
	drift map[driftKey]time.Time
	node  *v1.Node
}

type driftKey struct {
	family    v1.IPFamily
	dataplane string
}

// NewTracker returns a Tracker that reports a family unhealthy once a
// change has waited timeout for a successful sync. nodeName is the node
// whose eligibility /healthz reports; "" skips that check.
func NewTracker(c clock.PassiveClock, timeout time.Duration, nodeName string) *Tracker {
	return &Tracker{
		clock:       c,
		timeout:     timeout,
		nodeName:    nodeName,
		lastUpdated: map[v1.IPFamily]time.Time{},
		queued:      map[v1.IPFamily]time.Time{},
		carried:     map[v1.IPFamily]time.Time{},
		drift:       map[driftKey]time.Time{},
	}
}

// Start marks every family updated, as kube-proxy does when its loop
// starts, and also queued: the initial sync is owed from the start, so a
// proxy whose sources never sync turns unhealthy after the timeout (upstream
// stays healthy forever then).
func (t *Tracker) Start(fams ...v1.IPFamily) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range fams {
		t.lastUpdated[f] = now
	}
	t.queue(now, fams)
}

// Queued records that a change for fams waits for a sync; only the oldest
// waiting change counts.
func (t *Tracker) Queued(fams ...v1.IPFamily) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.queue(now, fams)
}

// Drifted records that dataplane, of family f, found what it programmed
// changed by someone else (its canary, dataplane.KernelWatcher, said so):
// /healthz answers 503 naming it until Repaired is called for it. Load
// balancers pick nodes by /healthz, and a node whose rules were flushed
// would drop or misroute what they send. The drift also counts as a
// queued change of f, so that /livez too fails if no sync repairs it
// within the timeout.
func (t *Tracker) Drifted(f v1.IPFamily, dataplane string) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	k := driftKey{f, dataplane}
	if _, ok := t.drift[k]; !ok {
		t.drift[k] = now
	}
	t.queue(now, []v1.IPFamily{f})
}

// Repaired records that dataplane, of family f, read back what it
// programmed and repaired what differed: the drift Drifted reported is
// gone.
func (t *Tracker) Repaired(f v1.IPFamily, dataplane string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.drift, driftKey{f, dataplane})
}

func (t *Tracker) queue(now time.Time, fams []v1.IPFamily) {
	for _, f := range fams {
		if _, ok := t.queued[f]; !ok {
			t.queued[f] = now
		}
	}
}

// Syncing records that a sync of fams begins: it carries every change
// queued so far (call it before the sync reads its input), and changes
// queued from now on wait for the next sync.
func (t *Tracker) Syncing(fams ...v1.IPFamily) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range fams {
		q, ok := t.queued[f]
		if !ok {
			continue
		}
		if c, ok := t.carried[f]; !ok || q.Before(c) {
			t.carried[f] = q
		}
		delete(t.queued, f)
	}
}

// Synced records that the syncs of family f begun so far succeeded: every
// dataplane of f programs what they carried.
func (t *Tracker) Synced(f v1.IPFamily) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.carried, f)
	t.lastUpdated[f] = now
}

// SetNode records the proxy's Node (nil when it is gone), whose
// eligibility /healthz reports.
func (t *Tracker) SetNode(n *v1.Node) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.node = n
}

// Report reports unhealthy any family that has been started and has a
// change queued for the timeout or longer, and lists unrepaired drift.
// NodeEligible is left nil.
func (t *Tracker) Report() Report {
	now := t.clock.Now()
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := Report{CurrentTime: now, Healthy: true, Status: map[v1.IPFamily]FamilyStatus{}}
	for f, last := range t.lastUpdated {
		if last.After(out.LastUpdated) {
			out.LastUpdated = last
		}
		fs := FamilyStatus{LastUpdated: last, Healthy: true}
		if t.late(now, t.queued, f) || t.late(now, t.carried, f) {
			fs.Healthy = false
			out.Healthy = false
		}
		out.Status[f] = fs
	}
	for k, since := range t.drift {
		out.Drift = append(out.Drift, Drift{IPFamily: k.family, Dataplane: k.dataplane, Since: since})
	}
	slices.SortFunc(out.Drift, func(a, b Drift) int {
		return cmp.Or(cmp.Compare(a.IPFamily, b.IPFamily), cmp.Compare(a.Dataplane, b.Dataplane))
	})
	return out
}

// Serving reports whether load balancers should send this node traffic as
// far as the proxy is concerned: it is healthy and no dataplane has
// unrepaired drift. /healthz and the health-check node ports answer by it.
func (t *Tracker) Serving() bool {
	r := t.Report()
	return r.Healthy && len(r.Drift) == 0
}

// late reports whether family f has a change in waiting that has waited
// the timeout or longer.
func (t *Tracker) late(now time.Time, waiting map[v1.IPFamily]time.Time, f v1.IPFamily) bool {
	since, ok := waiting[f]
	return ok && now.Sub(since) >= t.timeout
}

// NodeEligible reports whether load balancers may send traffic to this
// node: it exists and is neither being deleted nor about to be by the
// autoscaler. Without a node name there is nothing to check.
func (t *Tracker) NodeEligible() bool {
	if t.nodeName == "" {
		return true
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := t.node
	if n == nil || n.DeletionTimestamp != nil {
		return false
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == ToBeDeletedTaint {
			return false
		}
	}
	return true
}

// Healthz returns kube-proxy's /healthz handler: 200 while healthy, free
// of unrepaired drift and the node is eligible, else 503, with a Report
// (NodeEligible set) as JSON.
func (t *Tracker) Healthz() http.Handler { return healthzHandler{t} }

// Livez returns kube-proxy's /livez handler: /healthz without the node
// eligibility check and the drift check (a drift fails it only once
// unrepaired for the timeout, like any queued change: a restart would
// not repair it faster).
func (t *Tracker) Livez() http.Handler { return livezHandler{t} }

type healthzHandler struct{ t *Tracker }

func (z healthzHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r := z.t.Report()
	eligible := z.t.NodeEligible()
	r.NodeEligible = &eligible
	write(w, r, r.Healthy && len(r.Drift) == 0 && eligible)
}

type livezHandler struct{ t *Tracker }

func (z livezHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r := z.t.Report()
	write(w, r, r.Healthy)
}

func write(w http.ResponseWriter, r Report, ok bool) {
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
		r.LastUpdated = r.CurrentTime
	}
	body, _ := json.Marshal(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
