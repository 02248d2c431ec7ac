package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// vmEnv opts into TestVMClusterUp, which boots a VM under TCG for many
// minutes of both cores.
const vmEnv = "PROXYKIT_E2E_VM"

// TestVMClusterUp brings up a cluster whose one worker is a VM, runs the
// agent there in ipvs mode, and checks that a pod on the VM answers
// through a NodePort Service from the runner and through its cluster IP
// from the VM, that the kernel's IPVS table holds the Service, and that
// Down leaves nothing (qemu included).
func TestVMClusterUp(t *testing.T) {
	if os.Getenv(vmEnv) != "1" {
		t.Skipf("boots a VM under TCG for minutes: set %s=1", vmEnv)
	}
	bin, images := testBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	workDir := os.Getenv(workDirEnv)
	if workDir == "" {
		workDir = t.TempDir()
	}
	start := time.Now()
	c, err := Up(ctx, Config{Nodes: 1, VM: &VM{}, Bin: bin, Images: images, WorkDir: workDir, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("up in %v", time.Since(start).Round(time.Second))
	downed := false
	defer func() {
		if !downed {
			if err := c.Down(context.Background()); err != nil {
				t.Error(err)
			}
		}
	}()
	if err := c.StartProxy(ctx, Proxy{Name: "proxykit", Binary: bin.Agent, Mode: "ipvs"}); err != nil {
		t.Fatal(err)
	}
	vm := c.vmList()[0]
	cs := c.Client().CoreV1()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "netexec", Labels: map[string]string{"app": "netexec"}},
		Spec: corev1.PodSpec{
			NodeName: vm.name,
			Containers: []corev1.Container{{
				Name: "netexec", Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
				ImagePullPolicy: corev1.PullNever, Args: []string{"netexec", "--http-port=8080"},
			}},
		},
	}
	if _, err := cs.Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "netexec"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "netexec"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podStart := time.Now()
	waitFor(ctx, t, "pod netexec running", 10*time.Minute, func() error {
		p, err := cs.Pods("default").Get(ctx, "netexec", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	t.Logf("pod running after %v", time.Since(podStart).Round(time.Second))
	nodePort := fmt.Sprintf("http://%s:%d/hostname", vm.ip, svc.Spec.Ports[0].NodePort)
	waitFor(ctx, t, "NodePort answers from the runner", 3*time.Minute, func() error {
		resp, err := c.HTTPClient().Get(nodePort)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && string(b) != "netexec" {
			err = fmt.Errorf("%s answered %q", nodePort, b)
		}
		return err
	})
	// busybox's wget crashes (static glibc); nc speaks HTTP well enough.
	get := fmt.Sprintf(`printf 'GET /hostname HTTP/1.0\r\n\r\n' | nc -w 10 %s 80`, svc.Spec.ClusterIP)
	waitFor(ctx, t, "cluster IP answers in the VM", 3*time.Minute, func() error {
		out, err := c.vmCtl(ctx, vm, "exec", "nc", []string{"sh", "-c", get})
		if err == nil && !strings.Contains(out, "\r\n\r\nnetexec") {
			err = fmt.Errorf("%s: %q", get, out)
		}
		return err
	})
	out, err := c.vmCtl(ctx, vm, "exec", "cat", []string{"cat", "/proc/net/ip_vs"})
	if err != nil {
		t.Fatal(err)
	}
	// /proc/net/ip_vs prints addresses in hex: 10.96.x.y is 0A60....
	if !strings.Contains(out, "TCP  0A60") {
		t.Errorf("the VM's IPVS table holds no Service of %s:\n%s", ServiceCIDR, out)
	}
	if err := c.StopProxy(ctx); err != nil {
		t.Error(err)
	}
	left := c.footprint(t)
	downed = true
	since := time.Now()
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	left.check(t, since)
}

// waitFor retries f every two seconds until it succeeds, failing t after
// limit.
func waitFor(ctx context.Context, t *testing.T, what string, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %v: %v", what, limit, err)
		}
		time.Sleep(2 * time.Second)
	}
}
