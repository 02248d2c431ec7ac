package userspace

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults of the Config fields whose zero value means "the default".
const (
	DefaultDialTimeout     = 2 * time.Second
	DefaultTCPIdleTimeout  = 24 * time.Hour
	DefaultUDPIdleTimeout  = 30 * time.Second
	DefaultDrainTimeout    = 30 * time.Second
	DefaultMaxConnections  = 16384
	DefaultBindRetryPeriod = 5 * time.Second
)

// FrontendKind is which kind of service address a Destination is.
type FrontendKind int

// The kinds of Destination.
const (
	ClusterIP FrontendKind = iota
	ExternalIP
	LoadBalancerIP
	NodePort
)

// String returns the kind as Lookup's reasons spell it.
func (k FrontendKind) String() string {
	switch k {
	case ClusterIP:
		return "cluster IP"
	case ExternalIP:
		return "external IP"
	case LoadBalancerIP:
		return "load balancer IP"
	case NodePort:
		return "node port"
	}
	return fmt.Sprintf("FrontendKind(%d)", int(k))
}

// Destination is where packets a forwarder takes are addressed: a
// service address and port, or a node port.
type Destination struct {
	// Kind is that of the first service port (in State.Lookup's order)
	// claiming the destination when its forwarder was started.
	Kind FrontendKind
	// Addr is the cluster IP, external IP or LoadBalancer VIP with the
	// service port; for a NodePort, the family's unspecified address with
	// the node port (every local address serves it).
	Addr     netip.AddrPort
	Protocol v1.Protocol
}

// String returns "addr:port/PROTO".
func (f Destination) String() string { return f.Addr.String() + "/" + string(f.Protocol) }

// Balance is how a new connection picks among its candidate endpoints.
type Balance int

const (
	// RoundRobin takes the candidates in turn, per service port.
	RoundRobin Balance = iota
	// Random picks one uniformly, as kube-proxy's iptables mode does.
	Random
)

// Dialer opens connections to endpoints; *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config configures a Dataplane. The zero value forwards IPv4 services in
// unprivileged mode, each on its own service address (which the caller
// must hold on some interface), balancing round-robin, and takes a
// connection from any address the kernel holds for the node's own.
type Config struct {
	// Family is the IP family served; "" means IPv4. States of the other
	// family are refused.
	Family v1.IPFamily
	// Listen maps a frontend to the local address its forwarder listens
	// on, false leaving it unserved: each ClusterIP:port to a loopback
	// port, say. Port 0 picks a free port (Dataplane.Listeners tells
	// which). nil listens on Destination.Addr itself. Ignored in redirect
	// mode.
	Listen func(Destination) (netip.AddrPort, bool)
	// Redirect, if set, selects redirect mode (root): traffic to the
	// service addresses and node ports is caught by netfilter TPROXY,
	// REDIRECT and DNAT rules; see RedirectConfig.
	Redirect *RedirectConfig
	// LocalAddresses tells which sources, beyond loopback and the
	// State's Node.IPs, are the node itself (a second NIC's address, say),
	// whose traffic externalTrafficPolicy Local serves from every
	// endpoint. nil means the addresses of the family the kernel holds in
	// the network namespace of the first Sync after New or Cleanup,
	// followed over rtnetlink (a NETLINK_ROUTE socket, no other netlink
	// family) until Cleanup; if they cannot be read, the error is logged
	// and only loopback and Node.IPs are the node's. A
	// *FakeLocalAddresses fixes them, for tests.
	LocalAddresses LocalAddresses
	// Dialer connects to endpoints; nil means a net.Dialer. Keep it
	// returning *net.TCPConn for TCP: copying between two of them
	// splices in the kernel.
	Dialer Dialer
	// DialTimeout bounds each attempt to connect to an endpoint; 0 means
	// DefaultDialTimeout. A connection tries up to three endpoints.
	DialTimeout time.Duration
	// TCPIdleTimeout closes a TCP connection through which nothing moved
	// for that long; 0 means DefaultTCPIdleTimeout (kube-proxy's
	// conntrack timeout for established connections), negative never.
	TCPIdleTimeout time.Duration
	// UDPIdleTimeout ends a UDP session (one client address) that sent
	// or received nothing for that long; 0 means DefaultUDPIdleTimeout.
	UDPIdleTimeout time.Duration
	// DrainTimeout is how long connections to a removed endpoint, or of
	// a removed service, may go on before they are closed; 0 means
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// MaxConnections bounds the open TCP connections plus UDP sessions of
	// one service port; 0 means DefaultMaxConnections. Connections past it
	// are reset (datagrams of new UDP clients dropped) and counted.
	MaxConnections int
	// Balance chooses among a connection's candidate endpoints.
	Balance Balance
	// BindRetryPeriod is how often a forwarder that could not listen is
	// tried again; 0 means DefaultBindRetryPeriod. Each Sync tries too.
	BindRetryPeriod time.Duration
	// Logger receives sync summaries, bind failures and dial failures;
	// the zero value logs nothing.
	Logger logr.Logger
	// OnSkip, if set, is called with a short reason for every service
	// port left out as invalid (a cluster IP of the other family, port 0).
	OnSkip func(reason string)
	// Registerer receives the dataplane's metrics (see the package
	// documentation); nil registers none. Both families' Dataplanes may
	// share one.
	Registerer prometheus.Registerer
	// MetricsNamespace prefixes the metric names; "" means "proxykit".
	MetricsNamespace string
}

// Dataplane forwards the services of a State through Go forwarders. Its
// methods are safe for concurrent use; syncs are serialized.
type Dataplane struct {
	cfg     Config
	log     logr.Logger
	metrics *metrics
	dialer  Dialer
	redir   *redirector

	// mu serializes Sync, Cleanup and bind retries, and guards what they
	// own below.
	mu       sync.Mutex
	ports    map[servicemodel.PortName]portEntry
	svcs     map[types.NamespacedName][]servicemodel.PortName
	fwds     map[destKey]*forwarder
	unbound  map[destKey]*forwarder
	last     *dataplane.State
	synced   bool
	node     dataplane.Node
	settings dataplane.Settings
	report   dataplane.SyncReport
	retry    *time.Timer

	// routes is what connections are routed with; replaced under mu,
	// read by any goroutine.
	routesMu sync.RWMutex
	routes   routes
	// ifaces finds the interface of a connection while an interface
	// detector is configured; nil otherwise. finder, guarded by mu, is
	// kept until Cleanup, as connections being routed may hold it.
	ifaces atomic.Pointer[ifaceFinder]
	finder *ifaceFinder

	// wg counts every goroutine the Dataplane started.
	wg sync.WaitGroup
	// life is cancelled by Cleanup, ending every goroutine; the next Sync
	// makes a new one. Guarded by mu.
	life context.Context
	kill context.CancelFunc
}

var (
	_ dataplane.Dataplane    = (*Dataplane)(nil)
	_ dataplane.SyncReporter = (*Dataplane)(nil)
)

// New checks cfg and returns a Dataplane that serves nothing until its
// first Sync.
func New(cfg Config) (*Dataplane, error) {
	family, err := backend.Family("userspace", cfg.Family)
	if err != nil {
		return nil, err
	}
	cfg.Family = family
	for _, d := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{
		{"DialTimeout", &cfg.DialTimeout, DefaultDialTimeout},
		{"TCPIdleTimeout", &cfg.TCPIdleTimeout, DefaultTCPIdleTimeout},
		{"UDPIdleTimeout", &cfg.UDPIdleTimeout, DefaultUDPIdleTimeout},
		{"DrainTimeout", &cfg.DrainTimeout, DefaultDrainTimeout},
		{"BindRetryPeriod", &cfg.BindRetryPeriod, DefaultBindRetryPeriod},
	} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < 0 && d.field != "TCPIdleTimeout":
			return nil, fmt.Errorf("userspace: Config.%s %s is negative", d.field, *d.v)
		}
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxConnections < 0 {
		return nil, fmt.Errorf("userspace: Config.MaxConnections %d is negative", cfg.MaxConnections)
	}
	if cfg.Balance != RoundRobin && cfg.Balance != Random {
		return nil, fmt.Errorf("userspace: Config.Balance %d is neither RoundRobin nor Random", cfg.Balance)
	}
	m, err := newMetrics(cfg.Registerer, cfg.MetricsNamespace, cfg.Family)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{
		cfg:     cfg,
		log:     cfg.Logger.WithValues("dataplane", "userspace", "ipFamily", cfg.Family),
		metrics: m,
		dialer:  cfg.Dialer,
		ports:   map[servicemodel.PortName]portEntry{},
		fwds:    map[destKey]*forwarder{},
		unbound: map[destKey]*forwarder{},
	}
	if d.dialer == nil {
		d.dialer = &net.Dialer{}
	}
	if cfg.Redirect != nil {
		r, err := newRedirector(*cfg.Redirect, cfg.Family, d.log)
		if err != nil {
			return nil, err
		}
		d.redir = r
	}
	return d, nil
}

// Name returns "userspace".
func (d *Dataplane) Name() string { return "userspace" }

// LastSync describes the last successful Sync.
func (d *Dataplane) LastSync() dataplane.SyncReport { return backend.Locked(&d.mu, &d.report) }

// Listeners returns the local address each serving frontend listens on,
// with port 0 resolved; a frontend that could not bind, or has no endpoint
// (so that the kernel refuses its connections), is absent.
func (d *Dataplane) Listeners() map[Destination]netip.AddrPort {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[Destination]netip.AddrPort, len(d.fwds))
	for _, f := range d.fwds {
		if a, ok := f.boundAddr(); ok {
			out[f.fe] = a
		}
	}
	return out
}
