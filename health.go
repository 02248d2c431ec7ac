package proxykit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// ToBeDeletedTaint is the taint the cluster autoscaler puts on a node it is
// about to delete; /healthz fails on such a node so that load balancers
// drain it first.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// Health is the proxy's health, in kube-proxy's /healthz and /livez JSON
// shape.
type Health struct {
	// LastUpdated is the latest successful sync of any family. The HTTP
	// handlers report the current time instead while healthy, as
	// kube-proxy does for compatibility with older clients.
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// NodeEligible is set only in /healthz answers.
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Healthy is true when every family is.
	Healthy bool                         `json:"healthy"`
	Status  map[v1.IPFamily]FamilyHealth `json:"status,omitempty"`
}

// FamilyHealth is the health of one IP family's dataplanes.
type FamilyHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// proxyHealth tracks, per family, the last successful sync and the oldest
// change still waiting for one (kube-proxy's ProxyHealthServer).
type proxyHealth struct {
	clock    clock.PassiveClock
	timeout  time.Duration
	nodeName string
	metrics  *metrics

	mu           sync.RWMutex
	lastUpdated  map[v1.IPFamily]time.Time
	oldestQueued map[v1.IPFamily]time.Time
	node         *v1.Node
}

func newProxyHealth(c clock.PassiveClock, timeout time.Duration, nodeName string, m *metrics) *proxyHealth {
	return &proxyHealth{
		clock:        c,
		timeout:      timeout,
		nodeName:     nodeName,
		metrics:      m,
		lastUpdated:  map[v1.IPFamily]time.Time{},
		oldestQueued: map[v1.IPFamily]time.Time{},
	}
}

// start marks every family updated, as kube-proxy does when its loop
// starts, and also queued: the initial sync is owed from the start, so a
// proxy whose sources never sync turns unhealthy after the timeout (upstream
// stays healthy forever then).
func (h *proxyHealth) start(fams []v1.IPFamily) {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range fams {
		h.lastUpdated[f] = now
		if _, ok := h.oldestQueued[f]; !ok {
			h.oldestQueued[f] = now
		}
	}
}

// queued records that a change for fams waits for a sync; only the oldest
// waiting change counts.
func (h *proxyHealth) queued(fams []v1.IPFamily) {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range fams {
		if _, ok := h.oldestQueued[f]; !ok {
			h.oldestQueued[f] = now
		}
	}
}

// updated records a successful sync of every dataplane of family f.
func (h *proxyHealth) updated(f v1.IPFamily) {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.oldestQueued, f)
	h.lastUpdated[f] = now
}

func (h *proxyHealth) setNode(n *v1.Node) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.node = n
}

// Health reports unhealthy any family that has been updated at least once
// and has a change queued for HealthTimeout or longer.
func (h *proxyHealth) Health() Health {
	now := h.clock.Now()
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := Health{CurrentTime: now, Healthy: true, Status: map[v1.IPFamily]FamilyHealth{}}
	for f, last := range h.lastUpdated {
		if last.After(out.LastUpdated) {
			out.LastUpdated = last
		}
		fh := FamilyHealth{LastUpdated: last, Healthy: true}
		if q, ok := h.oldestQueued[f]; ok && now.Sub(q) >= h.timeout {
			fh.Healthy = false
			out.Healthy = false
		}
		out.Status[f] = fh
	}
	return out
}

// nodeEligible reports whether load balancers may send traffic to this
// node: it exists and is neither being deleted nor about to be by the
// autoscaler. Without a node name there is nothing to check.
func (h *proxyHealth) nodeEligible() bool {
	if h.nodeName == "" {
		return true
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := h.node
	if n == nil || n.DeletionTimestamp != nil {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			return false
		}
	}
	return true
}

type healthzHandler struct{ h *proxyHealth }

func (z healthzHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	health := z.h.Health()
	eligible := z.h.nodeEligible()
	health.NodeEligible = &eligible
	code := writeHealth(w, health, health.Healthy && eligible)
	z.h.metrics.healthz.WithLabelValues(strconv.Itoa(code)).Inc()
}

type livezHandler struct{ h *proxyHealth }

func (z livezHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	health := z.h.Health()
	code := writeHealth(w, health, health.Healthy)
	z.h.metrics.livez.WithLabelValues(strconv.Itoa(code)).Inc()
}

func writeHealth(w http.ResponseWriter, health Health, ok bool) int {
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
		health.LastUpdated = health.CurrentTime
	}
	body, _ := json.Marshal(health)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
	return code
}
