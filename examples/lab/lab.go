package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/proxykit/proxykit/source/manifest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Config describes one lab.
type Config struct {
	// Manifests is a folder of Service, EndpointSlice and Node YAML: the
	// Node's first InternalIP is the node's address, and every endpoint
	// address becomes a pod.
	Manifests string
	// Mode is the agent's --proxy-mode.
	Mode string
	// Agent is the node agent's binary.
	Agent string
	// Prefix starts the name of every namespace the lab creates.
	Prefix string
	// StateDir is where the lab records what it made, for Down and
	// RemoveRecorded; "" is DefaultStateDir.
	StateDir string
}

// Lab is a running lab: a node namespace running the agent, a client
// namespace linked to it, and a namespace per pod linked to the node as
// Calico links pods (a /32 route each, proxy ARP for the gateway).
type Lab struct {
	cfg              Config
	dir              string // the agent's manifests and log
	Node, Client     string // namespace names
	NodeIP, ClientIP netip.Addr
	Pods             []Pod
	// Service is the first TCP port of the first service with a cluster
	// IP: what the tasks curl.
	Service netip.AddrPort

	objects []runtime.Object
	agent   *exec.Cmd
	procs   []*exec.Cmd
	made    []madeNS // namespaces, in creation order
	// started holds the start time of each process the lab started.
	started map[*exec.Cmd]madeProc
}

// Pod is one endpoint address of the manifests, served in its own
// namespace.
type Pod struct {
	Name, NS string
	IP       netip.Addr
	Ports    []uint16
}

// childEnv carries the arguments of a lab process started inside a
// namespace (a pod's server, a client's request); see child.
const childEnv = "PROXYKIT_LAB_CHILD"

// Up builds the lab and starts the agent; on error it removes what it had
// made.
func Up(ctx context.Context, cfg Config) (_ *Lab, err error) {
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	l := &Lab{cfg: cfg, Node: cfg.Prefix + "-node", Client: cfg.Prefix + "-client"}
	if err := l.load(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(statePath(cfg.StateDir, cfg.Prefix)); err == nil {
		return nil, fmt.Errorf("a lab of prefix %s is recorded in %s: another runs, or one was left behind (lab --down --prefix %s)",
			cfg.Prefix, statePath(cfg.StateDir, cfg.Prefix), cfg.Prefix)
	}
	if l.dir, err = os.MkdirTemp("", cfg.Prefix+"-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Down())
		}
	}()
	if err := l.writeManifests(); err != nil {
		return nil, err
	}
	if err := l.wire(); err != nil {
		return nil, err
	}
	for _, p := range l.Pods {
		args := []string{"pod", p.Name}
		for _, port := range p.Ports {
			args = append(args, netip.AddrPortFrom(p.IP, port).String())
		}
		if _, err := l.start(p.NS, nil, args...); err != nil {
			return nil, err
		}
	}
	log, err := os.Create(filepath.Join(l.dir, "agent.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	l.agent = exec.Command("ip", "netns", "exec", l.Node, cfg.Agent, "--manifests", filepath.Join(l.dir, "manifests"),
		"--proxy-mode", cfg.Mode, "--hostname-override", l.nodeName(),
		"--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256")
	l.agent.Stdout, l.agent.Stderr = log, log
	if err := l.agent.Start(); err != nil {
		return nil, fmt.Errorf("start the agent %s: %w", cfg.Agent, err)
	}
	if err := l.recordStart(l.agent); err != nil {
		return nil, err
	}
	// The agent is up once the service answers.
	for range 300 {
		if got, _ := l.Fetch(ctx, 1); len(got) == 1 && !strings.HasPrefix(got[0], "error") {
			return l, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := os.ReadFile(log.Name())
	return nil, fmt.Errorf("%s never answered through the agent (--proxy-mode %s); its log:\n%s", l.Service, cfg.Mode, out)
}

// load reads the manifests and plans the namespaces.
func (l *Lab) load() error {
	files, err := filepath.Glob(filepath.Join(l.cfg.Manifests, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("--manifests %s: no *.yaml files (%v)", l.cfg.Manifests, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		objs, err := manifest.Decode(f, data)
		if err != nil {
			return err
		}
		l.objects = append(l.objects, objs...)
	}
	pods := map[netip.Addr]*Pod{}
	for _, o := range l.objects {
		switch o := o.(type) {
		case *v1.Node:
			for _, a := range o.Status.Addresses {
				if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == v1.NodeInternalIP && ip.Is4() && !l.NodeIP.IsValid() {
					l.NodeIP, l.ClientIP = ip, ip.Next()
				}
			}
		case *v1.Service:
			ip, err := netip.ParseAddr(o.Spec.ClusterIP)
			for _, p := range o.Spec.Ports {
				if err == nil && ip.Is4() && p.Protocol == v1.ProtocolTCP && !l.Service.IsValid() {
					l.Service = netip.AddrPortFrom(ip, uint16(p.Port))
				}
			}
		case *discovery.EndpointSlice:
			for _, ep := range o.Endpoints {
				for _, a := range ep.Addresses {
					ip, err := netip.ParseAddr(a)
					if err != nil || !ip.Is4() {
						continue
					}
					p := pods[ip]
					if p == nil {
						name := fmt.Sprintf("pod-%d", len(pods)+1)
						if ep.TargetRef != nil && ep.TargetRef.Name != "" {
							name = ep.TargetRef.Name
						}
						p = &Pod{Name: name, IP: ip}
						pods[ip] = p
					}
					for _, port := range o.Ports {
						if port.Port != nil && !slices.Contains(p.Ports, uint16(*port.Port)) {
							p.Ports = append(p.Ports, uint16(*port.Port))
						}
					}
				}
			}
		}
	}
	switch {
	case !l.NodeIP.IsValid():
		return fmt.Errorf("--manifests %s: no Node with an IPv4 InternalIP", l.cfg.Manifests)
	case !l.Service.IsValid():
		return fmt.Errorf("--manifests %s: no Service with an IPv4 cluster IP and a TCP port", l.cfg.Manifests)
	case len(pods) == 0:
		return fmt.Errorf("--manifests %s: no EndpointSlice with IPv4 endpoints", l.cfg.Manifests)
	}
	for _, p := range pods {
		l.Pods = append(l.Pods, *p)
	}
	slices.SortFunc(l.Pods, func(a, b Pod) int { return a.IP.Compare(b.IP) })
	for i := range l.Pods {
		l.Pods[i].NS = fmt.Sprintf("%s-pod%d", l.cfg.Prefix, i+1)
	}
	return nil
}

func (l *Lab) nodeName() string {
	for _, o := range l.objects {
		if n, ok := o.(*v1.Node); ok {
			return n.Name
		}
	}
	return ""
}

// writeManifests writes the objects, as the agent will watch them, into
// one file that Remove rewrites.
func (l *Lab) writeManifests() error {
	var b strings.Builder
	for _, o := range l.objects {
		y, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	dir := filepath.Join(l.dir, "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(l.dir, "lab.yaml.new")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "lab.yaml"))
}

// Remove takes the pod's address out of every EndpointSlice, as if the pod
// had been deleted; its namespace and server stay, so that any traffic
// still reaching it would show.
func (l *Lab) Remove(name string) error {
	var ip netip.Addr
	for _, p := range l.Pods {
		if p.Name == name {
			ip = p.IP
		}
	}
	if !ip.IsValid() {
		return fmt.Errorf("no pod %q in the lab", name)
	}
	for i, o := range l.objects {
		if s, ok := o.(*discovery.EndpointSlice); ok {
			s = s.DeepCopy()
			s.Endpoints = slices.DeleteFunc(s.Endpoints, func(e discovery.Endpoint) bool { return slices.Contains(e.Addresses, ip.String()) })
			l.objects[i] = s
		}
	}
	return l.writeManifests()
}

// Fetch sends n requests from the client to the service, each on a new
// connection, and returns the answers ("error: ..." for a failed one).
func (l *Lab) Fetch(ctx context.Context, n int) ([]string, error) {
	var out strings.Builder
	cmd, err := l.start(l.Client, &out, "fetch", "http://"+l.Service.String()+"/", fmt.Sprint(n))
	if err != nil {
		return nil, err
	}
	l.procs = slices.DeleteFunc(l.procs, func(c *exec.Cmd) bool { return c == cmd })
	delete(l.started, cmd)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("fetch from %s: %w: %s", l.Client, err, out.String())
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n"), ctx.Err()
}

// start runs this program's child subcommand args inside namespace ns.
func (l *Lab) start(ns string, out io.Writer, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	enc, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self)
	cmd.Env = append(os.Environ(), childEnv+"="+string(enc))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l.procs = append(l.procs, cmd)
	return cmd, l.recordStart(cmd)
}

// Down stops the agent and the servers and deletes every namespace the lab
// made, whatever state it is in, and then its record. Processes it did not
// start are left running (a namespace one of them is in lives on until
// they end).
func (l *Lab) Down() error {
	if l.agent != nil && l.agent.Process != nil {
		_ = l.agent.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = l.agent.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = l.agent.Process.Kill()
			<-done
		}
	}
	for _, c := range l.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	var errs []error
	for _, ns := range slices.Backward(l.made) {
		errs = append(errs, deleteNS(ns.Name))
	}
	if l.dir != "" {
		errs = append(errs, os.RemoveAll(l.dir))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(statePath(l.cfg.StateDir, l.cfg.Prefix)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// deleteNS deletes the name ns; the namespace itself ends with the last
// process in it.
func deleteNS(ns string) error {
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", ns, err, out)
	}
	return nil
}

// Namespaces lists the namespaces whose names start with prefix.
func Namespaces(prefix string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	var list []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			list = append(list, f[0])
		}
	}
	return list, nil
}

// wire creates the namespaces and links them.
func (l *Lab) wire() error {
	var steps [][]string
	add := func(args ...string) { steps = append(steps, args) }
	for _, ns := range append([]string{l.Node, l.Client}, podNS(l.Pods)...) {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			return fmt.Errorf("ip netns add %s: %w: %s", ns, err, out)
		}
		dev, ino, err := nsIdentity(ns)
		if err != nil {
			return err
		}
		l.made = append(l.made, madeNS{Name: ns, Dev: dev, Ino: ino})
		if err := l.save(); err != nil {
			return err
		}
		add("-n", ns, "link", "set", "lo", "up")
	}
	n, c := l.Node, l.Client
	add("netns", "exec", n, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	add("-n", n, "link", "add", "client", "type", "veth", "peer", "name", "eth0", "netns", c)
	add("-n", n, "addr", "add", l.NodeIP.String()+"/24", "dev", "client")
	add("-n", n, "link", "set", "client", "up")
	add("-n", c, "addr", "add", l.ClientIP.String()+"/24", "dev", "eth0")
	add("-n", c, "link", "set", "eth0", "up")
	add("-n", c, "route", "add", "default", "via", l.NodeIP.String())
	// The node's default route is the client's side, the outside world,
	// which forwards nothing: traffic to a service without endpoints must
	// be routed before the node's rules reject it.
	add("-n", n, "route", "add", "default", "via", l.ClientIP.String())
	for i, p := range l.Pods {
		veth := fmt.Sprintf("pod%d", i+1)
		add("-n", n, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", p.NS)
		add("-n", n, "link", "set", veth, "up")
		add("netns", "exec", n, "sysctl", "-qw", "net.ipv4.conf."+veth+".proxy_arp=1")
		add("-n", n, "route", "add", p.IP.String()+"/32", "dev", veth)
		add("-n", p.NS, "addr", "add", p.IP.String()+"/32", "dev", "eth0")
		add("-n", p.NS, "link", "set", "eth0", "up")
		add("-n", p.NS, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
		add("-n", p.NS, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

func podNS(pods []Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.NS)
	}
	return out
}
