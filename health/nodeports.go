package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// EventRecorder records Kubernetes events; client-go's
// record.EventRecorder implements it.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// LocalEndpoints counts a service's ready endpoints on this node;
// endpoints.Map implements it.
type LocalEndpoints interface {
	LocalReadyEndpoints(service types.NamespacedName) int
}

// NodePortsConfig configures NodePorts. Family is required; every other
// zero value is documented on its field.
type NodePortsConfig struct {
	// Family is the IP family served: v1.IPv4Protocol or v1.IPv6Protocol.
	Family v1.IPFamily
	// NodeName names the node in the event recorded for a port that cannot
	// be opened.
	NodeName string
	// Addresses, if non-nil, are the addresses to listen on (those of
	// Family are used), replacing kube-proxy's choice from
	// NodePortAddresses.
	Addresses []netip.Addr
	// NodePortAddresses are the CIDRs node ports are restricted to
	// (dataplane.Settings.NodePortAddresses): the ports listen on the
	// local addresses within those of Family, or on every address when
	// there are none.
	NodePortAddresses []netip.Prefix
	// Healthy reports the proxy's health, answered as serviceProxyHealthy;
	// nil means always healthy.
	Healthy func() bool
	// Recorder, if set, receives a Warning event for each port that cannot
	// be opened.
	Recorder EventRecorder
	// Logger is where the ports log; the zero value discards.
	Logger logr.Logger

	// interfaceAddrs lists the local addresses; nil means
	// net.InterfaceAddrs.
	interfaceAddrs func() ([]net.Addr, error)
}

// NodePorts serves the health-check node port of every
// externalTrafficPolicy: Local LoadBalancer service of one family, telling
// load balancers whether this node has local endpoints for it (kube-proxy's
// ServiceHealthServer). It is fed after every successful sync.
type NodePorts struct {
	cfg NodePortsConfig
	wg  sync.WaitGroup

	mu       sync.RWMutex
	services map[types.NamespacedName]*hcInstance
}

type hcInstance struct {
	port    uint16
	servers []*http.Server
	// localEndpoints is guarded by NodePorts.mu.
	localEndpoints int
}

// NewNodePorts returns NodePorts serving nothing yet.
func NewNodePorts(cfg NodePortsConfig) *NodePorts {
	if cfg.interfaceAddrs == nil {
		cfg.interfaceAddrs = net.InterfaceAddrs
	}
	if cfg.Healthy == nil {
		cfg.Healthy = func() bool { return true }
	}
	return &NodePorts{cfg: cfg, services: map[types.NamespacedName]*hcInstance{}}
}

// Sync opens a listener per service in ports not yet served, closes those
// no longer wanted or whose port changed (a reopened one starts at zero
// endpoints), and sets every served service's local endpoint count from
// local. A service whose port cannot be opened is logged, recorded as an
// event, left out and retried at the next Sync. It returns how many ports
// are served and how many failed to open.
func (s *NodePorts) Sync(ports map[types.NamespacedName]uint16, local LocalEndpoints) (serving, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nn, inst := range s.services {
		if port, ok := ports[nn]; !ok || port != inst.port {
			s.cfg.Logger.V(2).Info("Closing health-check node port", "service", nn, "port", inst.port)
			inst.close()
			delete(s.services, nn)
		}
	}
	var addrs []netip.Addr
	for nn, port := range ports {
		if s.services[nn] != nil {
			continue
		}
		if addrs == nil {
			addrs = s.listenAddresses()
		}
		inst, err := s.open(nn, port, addrs)
		if err != nil {
			failed++
			msg := fmt.Sprintf("node %s failed to start healthcheck %q on port %d: %v", s.cfg.NodeName, nn.String(), port, err)
			s.cfg.Logger.Error(err, "Failed to open health-check node port", "service", nn, "port", port)
			if s.cfg.Recorder != nil {
				ref := &v1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: nn.Namespace, Name: nn.Name}
				s.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, "FailedToStartServiceHealthcheck", "%s", msg)
			}
			continue
		}
		s.cfg.Logger.V(2).Info("Opened health-check node port", "service", nn, "port", port, "addresses", addrs)
		s.services[nn] = inst
	}
	for nn, inst := range s.services {
		inst.localEndpoints = local.LocalReadyEndpoints(nn)
	}
	return len(s.services), failed
}

// open listens on port at every address; on any failure it closes what it
// opened, so that the next try (or another owner of the port) starts clean.
func (s *NodePorts) open(nn types.NamespacedName, port uint16, addrs []netip.Addr) (*hcInstance, error) {
	network := "tcp4"
	if s.cfg.Family == v1.IPv6Protocol {
		network = "tcp6"
	}
	inst := &hcInstance{port: port}
	for _, a := range addrs {
		ln, err := net.Listen(network, netip.AddrPortFrom(a, port).String())
		if err != nil {
			inst.close()
			return nil, err
		}
		srv := &http.Server{Handler: hcHandler{s: s, name: nn, inst: inst}, ReadHeaderTimeout: 10 * time.Second}
		inst.servers = append(inst.servers, srv)
		s.wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Logger.Error(err, "Health-check node port stopped", "service", nn, "address", ln.Addr())
			}
		})
	}
	return inst, nil
}

func (inst *hcInstance) close() {
	for _, srv := range inst.servers {
		_ = srv.Close()
	}
	inst.servers = nil
}

// Close stops every listener and waits for their goroutines.
func (s *NodePorts) Close() {
	s.mu.Lock()
	for nn, inst := range s.services {
		inst.close()
		delete(s.services, nn)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// listenAddresses picks, as kube-proxy does, the unspecified address unless
// NodePortAddresses restricts this family, in which case the local
// addresses within those CIDRs (re-read at each opening, where kube-proxy
// reads them once).
func (s *NodePorts) listenAddresses() []netip.Addr {
	is6 := s.cfg.Family == v1.IPv6Protocol
	if s.cfg.Addresses != nil {
		var out []netip.Addr
		for _, a := range s.cfg.Addresses {
			if a.Unmap().Is6() == is6 {
				out = append(out, a.Unmap())
			}
		}
		return out
	}
	all := []netip.Addr{netip.IPv4Unspecified()}
	if is6 {
		all = []netip.Addr{netip.IPv6Unspecified()}
	}
	var cidrs []netip.Prefix
	for _, c := range s.cfg.NodePortAddresses {
		if c.Addr().Unmap().Is6() != is6 {
			continue
		}
		if c.Bits() == 0 {
			return all
		}
		cidrs = append(cidrs, c)
	}
	if len(cidrs) == 0 {
		return all
	}
	ifAddrs, err := s.cfg.interfaceAddrs()
	if err != nil {
		s.cfg.Logger.Error(err, "Failed to list node addresses; health-check node ports listen on all addresses")
		return all
	}
	out := []netip.Addr{}
	for _, ia := range ifAddrs {
		var ip net.IP
		switch v := ia.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		a = a.Unmap()
		if slices.ContainsFunc(cidrs, func(c netip.Prefix) bool { return c.Contains(a) }) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

type hcHandler struct {
	s    *NodePorts
	name types.NamespacedName
	inst *hcInstance
}

type hcBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func (h hcHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.s.mu.RLock()
	current := h.s.services[h.name] == h.inst
	count := h.inst.localEndpoints
	h.s.mu.RUnlock()
	if !current {
		// Closed meanwhile: answer nothing, as kube-proxy does.
		return
	}
	var body hcBody
	body.Service.Namespace, body.Service.Name = h.name.Namespace, h.name.Name
	body.LocalEndpoints = count
	body.ServiceProxyHealthy = h.s.cfg.Healthy()
	out, _ := json.MarshalIndent(body, "", "\t")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
	if count > 0 && body.ServiceProxyHealthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(out)
}
