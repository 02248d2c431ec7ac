package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// The lab's addresses: nodes and the control plane share NodeNet on the
// bridge; node i's pods live in 10.244.i.0/24.
const (
	apiAddress  = "10.99.0.1"
	ClusterCIDR = "10.244.0.0/16"
	agentSA     = "proxykit-nodeagent"
	agentSANS   = "kube-system"
)

// LabConfig configures NewLab. The zero value is one node with one pod
// and agents run with the DaemonSet's RBAC and the default flags.
type LabConfig struct {
	// Nodes is the number of nodes; 0 means 1.
	Nodes int
	// PodsPerNode is the number of pods behind each node; 0 means 1.
	PodsPerNode int
	// AgentArgs are extra flags for every agent.
	AgentArgs []string
	// Rules replaces the rules of the agent's ClusterRole; nil keeps the
	// DaemonSet's (examples/nodeagent/deploy/rbac.yaml).
	Rules []rbacv1.PolicyRule
	// NoAgents creates the nodes without starting their agents.
	NoAgents bool
}

// Lab is a control plane and nodes on one bridge, each node running the
// node agent with the service account of the DaemonSet, with pods behind
// it serving their name over TCP.
type Lab struct {
	CP     *ControlPlane
	Bridge *NS
	Nodes  []*Node
	// Kubeconfig is the agents' kubeconfig (the DaemonSet's service
	// account).
	Kubeconfig string

	t    testing.TB
	dir  string
	bin  string
	args []string
	// kpKubeconfig is kube-proxy's, once made.
	kpKubeconfig string
}

// Node is one node of the lab: a namespace on the bridge, its Node object,
// its agent and, when a test starts it, upstream kube-proxy.
type Node struct {
	Name, IP  string
	NS        *NS
	Pods      []*Pod
	lab       *Lab
	agent     *process
	kubeProxy *process
	Index     int
}

// Pod is a namespace behind a node serving its Name to every TCP
// connection on PodPort.
type Pod struct {
	Name, IP string
	NS       *NS
	Node     *Node
}

// PodPort is where every pod serves its name.
const PodPort = 8080

// NewLab builds the lab and starts the agents with the given binaries.
func NewLab(t testing.TB, bins Binaries, agentBin string, cfg LabConfig) *Lab {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = 1
	}
	if cfg.PodsPerNode == 0 {
		cfg.PodsPerNode = 1
	}
	l := &Lab{t: t, dir: t.TempDir(), bin: agentBin, args: cfg.AgentArgs}
	l.Bridge = NewNS(t, "br")
	l.Bridge.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	l.Bridge.MustRun(t, "ip", "link", "set", "br0", "up")
	l.CP = StartControlPlane(t, bins, ControlPlaneConfig{
		Address: apiAddress,
		Setup:   func(ns *NS) { l.attach(ns, "cp", apiAddress+"/16") },
	})
	ctx := context.Background()
	if err := l.applyRBAC(ctx, cfg.Rules); err != nil {
		t.Fatal(err)
	}
	token, err := l.CP.ServiceAccountToken(ctx, agentSANS, agentSA)
	if err != nil {
		t.Fatal(err)
	}
	if l.Kubeconfig, err = l.CP.WriteKubeconfig(l.dir, agentSA, token); err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Nodes {
		l.Nodes = append(l.Nodes, l.addNode(ctx, i, cfg.PodsPerNode))
	}
	// Every node routes every other node's pod subnet through it.
	for _, n := range l.Nodes {
		for _, o := range l.Nodes {
			if o != n {
				n.NS.MustRun(t, "ip", "route", "add", fmt.Sprintf("10.244.%d.0/24", o.Index), "via", o.IP)
			}
		}
	}
	if !cfg.NoAgents {
		for _, n := range l.Nodes {
			n.StartAgent()
		}
	}
	return l
}

// attach links ns to the bridge with addr.
func (l *Lab) attach(ns *NS, name, addr string) {
	l.t.Helper()
	Veth(l.t, ns, "eth0", []string{addr}, l.Bridge, "b-"+name, nil)
	l.Bridge.MustRun(l.t, "ip", "link", "set", "b-"+name, "master", "br0")
}

func (l *Lab) addNode(ctx context.Context, i, pods int) *Node {
	t := l.t
	n := &Node{Name: fmt.Sprintf("node%d", i), IP: fmt.Sprintf("10.99.1.%d", i+1), NS: NewNS(t, fmt.Sprintf("n%d", i)), lab: l, Index: i}
	l.attach(n.NS, n.Name, n.IP+"/16")
	n.NS.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{"kubernetes.io/hostname": n.Name}},
		Spec:       v1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.0/24", i), PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", i)}},
	}
	created, err := l.CP.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: n.IP}, {Type: v1.NodeHostName, Address: n.Name}}
	if _, err := l.CP.Admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for j := range pods {
		p := &Pod{Name: fmt.Sprintf("%s-pod%d", n.Name, j), IP: fmt.Sprintf("10.244.%d.%d", i, j+2), NS: NewNS(t, fmt.Sprintf("p%d%d", i, j)), Node: n}
		veth := fmt.Sprintf("vp%d", j)
		n.NS.MustRun(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", p.NS.Name)
		n.NS.MustRun(t, "ip", "addr", "add", fmt.Sprintf("10.244.%d.1/32", i), "dev", veth)
		n.NS.MustRun(t, "ip", "link", "set", veth, "up")
		n.NS.MustRun(t, "ip", "route", "add", p.IP+"/32", "dev", veth)
		p.NS.MustRun(t, "ip", "addr", "add", p.IP+"/32", "dev", "eth0")
		p.NS.MustRun(t, "ip", "link", "set", "eth0", "up")
		p.NS.MustRun(t, "ip", "route", "add", fmt.Sprintf("10.244.%d.1", i), "dev", "eth0")
		p.NS.MustRun(t, "ip", "route", "add", "default", "via", fmt.Sprintf("10.244.%d.1", i))
		if err := p.serve(t); err != nil {
			t.Fatal(err)
		}
		n.Pods = append(n.Pods, p)
	}
	return n
}

// serve answers every connection on PodPort with the pod's name.
func (p *Pod) serve(t testing.TB) error {
	var ln net.Listener
	err := p.NS.do(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(p.IP, strconv.Itoa(PodPort)))
		return err
	})
	if err != nil {
		return fmt.Errorf("pod %s: %w", p.Name, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(p.Name + "\n"))
			c.Close()
		}
	}()
	return nil
}

// Get connects from the pod to addr and returns what the server said: the
// serving pod's name. A refused or timed-out connection is an error.
func (p *Pod) Get(addr string, timeout time.Duration) (string, error) {
	var conn net.Conn
	err := p.NS.do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

// StartAgent starts the node's agent (again, after KillAgent).
func (n *Node) StartAgent(extra ...string) {
	n.lab.t.Helper()
	p, err := startProcess(n.lab.t, n.NS, n.lab.dir, "agent-"+n.Name, n.lab.bin, n.agentArgs(extra...)...)
	if err != nil {
		n.lab.t.Fatal(err)
	}
	n.agent = p
}

// agentArgs are the agent's flags: the lab's, then the LabConfig's, then
// extra (a later flag wins).
func (n *Node) agentArgs(extra ...string) []string {
	args := append([]string{
		"--kubeconfig", n.lab.Kubeconfig, "--hostname-override", n.Name,
		"--cluster-cidr", ClusterCIDR, "--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--oom-score-adj=0",
		"--healthz-bind-address", HealthzAddr, "--metrics-bind-address", MetricsAddr,
	}, n.lab.args...)
	return append(args, extra...)
}

// KillAgent kills the node's agent by PID.
func (n *Node) KillAgent() { n.agent.kill() }

// StopAgent stops the agent with SIGTERM, as deleting its pod does: its
// rules stay in the kernel.
func (n *Node) StopAgent() { n.agent.stop(10 * time.Second) }

// AgentPID is the running agent's process ID.
func (n *Node) AgentPID() int { return n.agent.cmd.Process.Pid }

// AgentLog is what the node's agents logged so far, restarts included.
func (n *Node) AgentLog() string {
	b, _ := os.ReadFile(filepath.Join(n.lab.dir, "agent-"+n.Name+".log"))
	return string(b)
}

// AgentExited reports whether the agent has ended.
func (n *Node) AgentExited() bool { return n.agent.exited() }

// Metric returns the sum of the samples of metric (a name, or a name with
// labels as printed in the text exposition) served at MetricsAddr, the
// agent's (or kube-proxy's, which exports the same names), 0 if none.
func (n *Node) Metric(metric string) (float64, error) {
	return metricAt(n.NS, MetricsAddr, metric)
}

// Metrics is Metric of several metrics from one scrape.
func (n *Node) Metrics(metrics ...string) (map[string]float64, error) {
	return metricsAt(n.NS, MetricsAddr, metrics...)
}

// metricAt is Node.Metric from the metrics served at addr in ns.
func metricAt(ns *NS, addr, metric string) (float64, error) {
	m, err := metricsAt(ns, addr, metric)
	return m[metric], err
}

// metricsAt sums the samples of each of metrics served at addr in ns.
func metricsAt(ns *NS, addr string, metrics ...string) (map[string]float64, error) {
	hc := httpIn(ns)
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sums := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, metric := range metrics {
			if !strings.HasPrefix(line, metric) {
				continue
			}
			rest := line[len(metric):]
			if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				sums[metric] += v
			}
		}
	}
	return sums, sc.Err()
}

// CPUProfile writes a CPU profile of the agent (started with --profiling)
// over the next d to path.
func (n *Node) CPUProfile(path string, d time.Duration) error {
	hc := httpIn(n.NS)
	hc.Timeout = d + 10*time.Second
	resp, err := hc.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", MetricsAddr, int(d.Seconds())))
	if err != nil {
		return fmt.Errorf("agent profile: %w", err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("agent profile: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		return fmt.Errorf("agent profile: %w", err)
	}
	return f.Close()
}

// RSS is the agent's resident set size in bytes.
func (n *Node) RSS() (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(n.AgentPID()), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", n.AgentPID())
}

// applyRBAC creates the DaemonSet's service account, ClusterRole and
// binding from examples/nodeagent/deploy/rbac.yaml, with the role's rules
// replaced by rules unless nil.
func (l *Lab) applyRBAC(ctx context.Context, rules []rbacv1.PolicyRule) error {
	path := filepath.Join(moduleDir(), "..", "..", "examples", "nodeagent", "deploy", "rbac.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := scheme.Codecs.UniversalDeserializer()
	for _, doc := range strings.Split(string(b), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := dec.Decode([]byte(doc), nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := l.create(ctx, obj, rules); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

func (l *Lab) create(ctx context.Context, obj runtime.Object, rules []rbacv1.PolicyRule) error {
	c := l.CP.Admin
	var err error
	switch o := obj.(type) {
	case *v1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		if rules != nil {
			o.Rules = rules
		}
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	default:
		err = fmt.Errorf("unexpected %T", obj)
	}
	return err
}
