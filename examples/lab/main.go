// Command lab builds a throw-away Kubernetes service lab in network
// namespaces on one machine (a node running proxykit's node agent, a pod
// per endpoint of the manifests, a client) so that the classic kube-proxy
// hands-on tasks can be done for real: curl a ClusterIP and watch the
// answering pod change, remove a pod and watch traffic move, read the
// rules, ask the agent its mode. It needs root, ip(8) and the tools of the
// chosen mode; it changes nothing outside the namespaces it creates, and
// deletes them when it ends, on Ctrl-C too.
//
// From the repository's root:
//
//	sudo go run ./examples/lab                           # iptables mode, examples/lab/manifests
//	sudo go run ./examples/lab --proxy-mode nftables     # or userspace
//	sudo go run ./examples/lab --manifests DIR           # your own Services, EndpointSlices and Node
//	sudo go run ./examples/lab --down                    # remove what a killed run made, and nothing else
//
// It builds the node agent from examples/nodeagent (or takes --agent), then
// reads commands: "curl [N]", "remove POD", "rules", "mode", "quit".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if args := os.Getenv(childEnv); args != "" {
		os.Exit(child(args))
	}
	// Ctrl-C ends the lab as "quit" does: the lab is removed first.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	manifests := fs.String("manifests", filepath.Join("examples", "lab", "manifests"), "folder of Service, EndpointSlice and Node YAML to build the lab from")
	mode := fs.String("proxy-mode", "iptables", "the agent's mode: iptables, nftables or userspace")
	agent := fs.String("agent", "", "a built node agent (default: build examples/nodeagent from --repo)")
	repo := fs.String("repo", ".", "the proxykit repository, to build the agent from")
	prefix := fs.String("prefix", "pklab", "the prefix of the namespaces' names")
	down := fs.Bool("down", false, "remove what a lab left behind made (its namespaces, processes and folder, as it recorded them), and exit")
	stateDir := fs.String("state-dir", DefaultStateDir, "where a lab records what it made, for --down")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the lab creates network namespaces: run it as root")
	}
	if *down {
		return RemoveRecorded(*stateDir, *prefix, out)
	}
	left, err := Namespaces(*prefix)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("namespaces %v exist: another lab runs, or one was left behind (lab --down --prefix %s removes what a lab made)", left, *prefix)
	}
	if *agent == "" {
		dir, err := os.MkdirTemp("", "pklab-agent-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*agent = filepath.Join(dir, "nodeagent")
		fmt.Fprintln(out, "building the node agent…")
		build := exec.CommandContext(ctx, "go", "-C", filepath.Join(*repo, "examples", "nodeagent"), "build", "-o", *agent, ".")
		if b, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go -C %s build: %w: %s", filepath.Join(*repo, "examples", "nodeagent"), err, b)
		}
	}
	l, err := Up(ctx, Config{Manifests: *manifests, Mode: *mode, Agent: *agent, Prefix: *prefix, StateDir: *stateDir})
	if err != nil {
		return err
	}
	defer func() {
		if err := l.Down(); err != nil {
			fmt.Fprintln(out, "teardown:", err)
		} else {
			fmt.Fprintln(out, "lab removed: no namespace left")
		}
	}()
	printTasks(out, l)
	return l.interact(ctx, in, out)
}

func printTasks(out io.Writer, l *Lab) {
	svc := l.Service.String()
	fmt.Fprintf(out, `
The lab is up: node %s (%s, the agent in --proxy-mode %s), client %s (%s), pods:
`, l.Node, l.NodeIP, l.cfg.Mode, l.Client, l.ClientIP)
	for _, p := range l.Pods {
		fmt.Fprintf(out, "  %-8s %-15s namespace %s\n", p.Name, p.IP, p.NS)
	}
	fmt.Fprintf(out, `
Tasks (in another shell, as root, or type the commands in brackets here):
 1. Traffic distribution: curl the service a few times and count the pods.   [curl 20]
      for i in $(seq 10); do ip netns exec %[1]s curl -s http://%[2]s/; done
 2. Remove a pod (its endpoint leaves the EndpointSlice) and curl again.       [remove %[3]s]
 3. Inspect the rules the agent wrote.                                         [rules]
      ip netns exec %[4]s iptables-save -t nat | grep PK      # iptables and userspace
      ip netns exec %[4]s nft list ruleset                    # nftables
 4. Determine the mode, as with kube-proxy.                                    [mode]
      ip netns exec %[4]s curl -s http://127.0.0.1:10249/proxyMode
The agent watches %[5]s; its log is %[6]s.
Ctrl-C or "quit" removes the lab.
`, l.Client, svc, l.Pods[0].Name, l.Node, filepath.Join(l.dir, "manifests"), filepath.Join(l.dir, "agent.log"))
}

// interact runs the commands read from in until quit, the end of in or ctx.
func (l *Lab) interact(ctx context.Context, in io.Reader, out io.Writer) error {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for {
		fmt.Fprint(out, "lab> ")
		var line string
		select {
		case <-ctx.Done():
			fmt.Fprintln(out)
			return nil
		case l, ok := <-lines:
			if !ok {
				return nil
			}
			line = l
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var err error
		switch f[0] {
		case "quit", "exit":
			return nil
		case "curl":
			n := 10
			if len(f) > 1 {
				if n, err = strconv.Atoi(f[1]); err != nil || n < 1 || n > 1000 {
					err = fmt.Errorf("curl %s: want a count from 1 to 1000", f[1])
					break
				}
			}
			err = l.curl(ctx, n, out)
		case "remove":
			if len(f) != 2 {
				err = errors.New("remove POD")
				break
			}
			if err = l.Remove(f[1]); err == nil {
				fmt.Fprintf(out, "%s removed from the EndpointSlices; the agent re-reads them within a moment\n", f[1])
			}
		case "rules":
			err = l.rules(out)
		case "mode":
			err = l.mode(out)
		default:
			err = fmt.Errorf("%s: the commands are curl [N], remove POD, rules, mode, quit", f[0])
		}
		if err != nil {
			fmt.Fprintln(out, "error:", err)
		}
	}
}

func (l *Lab) curl(ctx context.Context, n int, out io.Writer) error {
	got, err := l.Fetch(ctx, n)
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, g := range got {
		count[g]++
	}
	var names []string
	for k := range count {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(out, "%4d × %s\n", count[k], k)
	}
	return nil
}

func (l *Lab) rules(out io.Writer) error {
	cmd := exec.Command("ip", "netns", "exec", l.Node, "iptables-save", "-t", "nat")
	if l.cfg.Mode == "nftables" {
		cmd = exec.Command("ip", "netns", "exec", l.Node, "nft", "list", "ruleset")
	}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

func (l *Lab) mode(out io.Writer) error {
	var b strings.Builder
	cmd, err := l.start(l.Node, &b, "get", "http://127.0.0.1:10249/proxyMode")
	if err != nil {
		return err
	}
	err = cmd.Wait()
	fmt.Fprintln(out, strings.TrimSpace(b.String()))
	return err
}

// child runs a subcommand the lab starts inside a namespace: "pod NAME
// ADDR:PORT..." serves HTTP answering with the pod's name and address;
// "fetch URL N" prints the answers of N requests, each on a new
// connection; "get URL" prints one answer.
func child(enc string) int {
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil || len(args) < 2 {
		fmt.Fprintln(os.Stderr, "lab child: bad arguments", enc)
		return 2
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	switch args[0] {
	case "pod":
		errs := make(chan error)
		for _, addr := range args[2:] {
			srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintf(w, "%s %s\n", args[1], addr)
			})}
			go func() { errs <- srv.ListenAndServe() }()
		}
		fmt.Fprintln(os.Stderr, <-errs)
		return 1
	case "fetch", "get":
		n := 1
		if args[0] == "fetch" && len(args) > 2 {
			n, _ = strconv.Atoi(args[2])
		}
		for range n {
			resp, err := client.Get(args[1])
			if err != nil {
				fmt.Println("error:", err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Println(strings.TrimSpace(string(b)))
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "lab child: unknown command", args[0])
	return 2
}
