package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Timeouts of the bring-up steps: generous, the machine is shared and
// loaded.
const (
	apiServerTimeout = 3 * time.Minute
	nodesTimeout     = 4 * time.Minute
	socketTimeout    = time.Minute
)

// startOn starts a program on node n, logging to WorkDir/<node>/<name>.log.
func (c *Cluster) startOn(n *node, name string, argv ...string) (*process, error) {
	p, err := c.cg.startProcess(procCgroup(n.name, name), n.name+" "+name, c.logPath(n.name, name), nsenterArgs(n.holder.pid(), argv...)...)
	if err != nil {
		return nil, err
	}
	return c.track(p), nil
}

// controlPlaneArgs are the flags of the control plane's programs.
func (c *Cluster) controlPlaneArgs() map[string][]string {
	admin := c.Kubeconfig()
	return map[string][]string{
		"etcd": {
			"--name=e2e", "--data-dir=/var/lib/etcd",
			"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
			"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=e2e=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level=warn",
		},
		"kube-apiserver": {
			"--etcd-servers=http://127.0.0.1:2379", "--bind-address=0.0.0.0",
			fmt.Sprintf("--secure-port=%d", apiServerPort), "--advertise-address=" + NodeIP(1).String(),
			"--tls-cert-file=" + c.path(serverCertFile), "--tls-private-key-file=" + c.path(serverKeyFile),
			"--client-ca-file=" + c.path(caCertFile), "--cert-dir=/var/lib/kube-apiserver",
			"--service-cluster-ip-range=" + ServiceCIDR, "--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + c.path(saPubFile), "--service-account-signing-key-file=" + c.path(saKeyFile),
			"--token-auth-file=" + c.path(tokensFile), "--authorization-mode=Node,RBAC",
			"--kubelet-preferred-address-types=InternalIP,Hostname", "--allow-privileged=true", "--profiling=false",
		},
		"kube-controller-manager": {
			"--kubeconfig=" + admin, "--authentication-kubeconfig=" + admin, "--authorization-kubeconfig=" + admin,
			"--leader-elect=false", "--allocate-node-cidrs=true", "--cluster-cidr=" + ClusterCIDR, "--node-cidr-mask-size=24",
			"--service-cluster-ip-range=" + ServiceCIDR, "--service-account-private-key-file=" + c.path(saKeyFile),
			"--root-ca-file=" + c.path(caCertFile), "--bind-address=127.0.0.1", "--configure-cloud-routes=false", "--profiling=false",
		},
		"kube-scheduler": {
			"--kubeconfig=" + admin, "--authentication-kubeconfig=" + admin, "--authorization-kubeconfig=" + admin,
			"--leader-elect=false", "--bind-address=127.0.0.1", "--profiling=false",
		},
		"coredns": {"-conf", c.path(corefileFile)},
	}
}

// startControlPlane starts etcd and the API server on node 1, closes
// apiReady once the API server is ready, then starts the controller
// manager, the scheduler and CoreDNS and publishes CoreDNS as the
// kube-dns Service.
func (c *Cluster) startControlPlane(ctx context.Context, apiReady chan<- struct{}) error {
	n, bin, args := c.nodes[0], c.cfg.Bin, c.controlPlaneArgs()
	if _, err := c.startOn(n, "etcd", append([]string{bin.Etcd}, args["etcd"]...)...); err != nil {
		return err
	}
	api, err := c.startOn(n, "kube-apiserver", append([]string{bin.APIServer}, args["kube-apiserver"]...)...)
	if err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx, api); err != nil {
		return err
	}
	close(apiReady)
	c.logf("API server ready")
	for _, p := range []struct{ name, bin string }{
		{"kube-controller-manager", bin.ControllerManager}, {"kube-scheduler", bin.Scheduler}, {"coredns", bin.CoreDNS},
	} {
		if _, err := c.startOn(n, p.name, append([]string{p.bin}, args[p.name]...)...); err != nil {
			return err
		}
	}
	return c.createKubeDNS(ctx)
}

// waitAPIServer polls /readyz until it answers ok.
func (c *Cluster) waitAPIServer(ctx context.Context, api *process) error {
	ctx, cancel := context.WithTimeout(ctx, apiServerTimeout)
	defer cancel()
	var last error
	for {
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = err
		if api.exited() {
			return api.failure("exited before /readyz answered")
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return api.failure("/readyz: %v (last: %v)", err, last)
		}
	}
}

// kubeDNS is the selectorless kube-system/kube-dns Service, at the cluster
// IP every pod's resolv.conf names, and its EndpointSlice: CoreDNS on
// node 1's IP.
func kubeDNS() (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: DNSServiceIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kube-dns-coredns", Namespace: "kube-system",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: "kube-dns",
				discoveryv1.LabelManagedBy:   "proxykit-e2e",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
			{Name: ptr.To("dns-tcp"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{NodeIP(1).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To(NodeName(1)),
		}},
	}
	return svc, slice
}

// createKubeDNS creates kubeDNS's objects.
func (c *Cluster) createKubeDNS(ctx context.Context) error {
	svc, slice := kubeDNS()
	ctx, cancel := context.WithTimeout(ctx, apiServerTimeout)
	defer cancel()
	// The API server makes kube-system shortly after it is ready.
	for {
		_, err := c.client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster: create Service kube-system/kube-dns: %w", err)
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return fmt.Errorf("cluster: create Service kube-system/kube-dns: %w", err)
		}
	}
	if _, err := c.client.DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster: create EndpointSlice kube-system/%s: %w", slice.Name, err)
	}
	return nil
}
