package xtables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	goipt "github.com/coreos/go-iptables/iptables"
	"github.com/proxykit/proxykit/dataplane/internal/nfgen"
	v1 "k8s.io/api/core/v1"
)

// MaxChainName is the longest chain name the kernel accepts
// (XT_EXTENSION_MAXNAMELEN less its terminating NUL).
const MaxChainName = 28

// Runner is the door to iptables a program's rules go through: every
// change to the tables and every reading of them, which is what lets tests
// swap in a FakeRunner or run the real one inside a network namespace.
type Runner interface {
	// Restore feeds in to iptables-restore --noflush: only the chains it
	// names are touched, each table is committed atomically. A rejected
	// input returns a *RestoreError. in is streamed, never held whole by
	// the dataplane; it may be written more than once (to quote the line
	// the kernel rejected) and writes the same bytes each time.
	Restore(ctx context.Context, in RestoreInput) error
	// Save returns the iptables-save text of table.
	Save(ctx context.Context, table string) ([]byte, error)
	// EnsureJump puts j first in its built-in chain unless it is there.
	EnsureJump(ctx context.Context, j Jump) error
	// DeleteJump removes j; a missing rule or chain is not an error.
	DeleteJump(ctx context.Context, j Jump) error
	// ListChain returns the rules of one chain as "iptables -S" prints
	// them ("-A CHAIN ..."), without reading the rest of the table where
	// the backend allows; exists is false when the chain is missing.
	ListChain(ctx context.Context, table, chain string) (rules []string, exists bool, err error)
}

// RestoreInput is iptables-restore input, written on demand: the input of
// a full sync of a large cluster is tens of megabytes, which the dataplane
// streams from what it keeps of each service instead of copying it into
// one buffer first.
type RestoreInput interface {
	// WriteTo writes the whole input to w. Every call writes the same
	// bytes.
	io.WriterTo
	// Len is the number of bytes WriteTo writes.
	Len() int
}

// RestoreBytes is a RestoreInput held in memory.
type RestoreBytes []byte

// WriteTo implements io.WriterTo.
func (b RestoreBytes) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// Len implements RestoreInput.
func (b RestoreBytes) Len() int { return len(b) }

// readAll returns in as bytes, copying only when it is not RestoreBytes.
func readAll(in RestoreInput) ([]byte, error) {
	if b, ok := in.(RestoreBytes); ok {
		return b, nil
	}
	var buf bytes.Buffer
	buf.Grow(in.Len())
	if _, err := in.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Jump is a rule in a built-in chain that hooks one of the dataplane's
// chains in.
type Jump struct {
	Table, Chain string
	// Rule is the rule's arguments, e.g. {"-m", "comment", ..., "-j", "PK-SERVICES"}.
	Rule []string
}

// ExecConfig configures an ExecRunner. The zero value runs the IPv4 tools
// found on PATH.
type ExecConfig struct {
	// Family selects iptables-restore or ip6tables-restore; "" is IPv4.
	Family v1.IPFamily
	// WaitSeconds is passed as -w to every command; 0 means 5, as
	// kube-proxy waits for the xtables lock.
	WaitSeconds int
	// Variant picks the iptables backend binaries: "" runs iptables,
	// iptables-restore and iptables-save as found on PATH; "legacy" and
	// "nft" run iptables-legacy-restore and so on, or iptables-nft-restore.
	Variant string
	// RestoreTimeout is the deadline of a restore of n bytes; nil means
	// DefaultRestoreTimeout. A restore past it is killed (the kernel keeps
	// the tables as they were) and fails with a *RestoreError whose
	// Timeout is set, so that a sync never hangs on a restore that will
	// not finish.
	RestoreTimeout func(n int) time.Duration
}

// DefaultRestoreTimeout allows a restore a minute plus 20 seconds per MiB
// of input: iptables-legacy restores about 7 MiB/s and iptables-nft,
// here, 0.7 MiB/s for 3 MiB, far less for more.
func DefaultRestoreTimeout(n int) time.Duration {
	return time.Minute + time.Duration(n)*20*time.Second/(1<<20)
}

// ExecRunner runs the iptables binaries. Commands inherit the network
// namespace of the calling OS thread.
type ExecRunner struct {
	cfg     ExecConfig
	restore string
	save    string
	ipt     *goipt.IPTables
	backend string
}

// NewExecRunner finds the binaries and probes the iptables version.
func NewExecRunner(cfg ExecConfig) (*ExecRunner, error) {
	if cfg.WaitSeconds == 0 {
		cfg.WaitSeconds = 5
	}
	if cfg.RestoreTimeout == nil {
		cfg.RestoreTimeout = DefaultRestoreTimeout
	}
	proto, base := goipt.ProtocolIPv4, "iptables"
	if cfg.Family == v1.IPv6Protocol {
		proto, base = goipt.ProtocolIPv6, "ip6tables"
	}
	switch cfg.Variant {
	case "":
	case "legacy", "nft":
		base += "-" + cfg.Variant
	default:
		return nil, fmt.Errorf("iptables: unknown variant %q", cfg.Variant)
	}
	restore, save := base+"-restore", base+"-save"
	bin, err := exec.LookPath(base)
	if err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	ipt, err := goipt.New(goipt.IPFamily(proto), goipt.Timeout(cfg.WaitSeconds), goipt.Path(bin))
	if err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	r := &ExecRunner{cfg: cfg, ipt: ipt, backend: "legacy"}
	if out, err := exec.Command(bin, "--version").Output(); err == nil && bytes.Contains(out, []byte("nf_tables")) {
		r.backend = "nft"
	}
	if r.restore, err = exec.LookPath(restore); err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	if r.save, err = exec.LookPath(save); err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	return r, nil
}

// Version returns the iptables version go-iptables probed.
func (r *ExecRunner) Version() string {
	a, b, c := r.ipt.GetIptablesVersion()
	return fmt.Sprintf("%d.%d.%d", a, b, c)
}

// Restore implements Runner. The input is written to the command's
// standard input as the command reads it, through a small buffer.
func (r *ExecRunner) Restore(ctx context.Context, in RestoreInput) error {
	limit := r.cfg.RestoreTimeout(in.Len())
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.restore, "-w", fmt.Sprint(r.cfg.WaitSeconds), "--noflush")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	var werr error
	if err == nil {
		err = cmd.Start()
	}
	if err == nil {
		bw := bufio.NewWriterSize(stdin, 1<<16)
		if _, werr = in.WriteTo(bw); werr == nil {
			werr = bw.Flush()
		}
		// A command that rejects a line stops reading: the write fails
		// with a broken pipe, and its exit status and output say why.
		stdin.Close()
		err = cmd.Wait()
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &RestoreError{Output: out.String(), Timeout: limit, Err: fmt.Errorf("%w: %w", context.DeadlineExceeded, err)}
	}
	if err != nil {
		data, _ := readAll(in)
		return parseRestoreError(data, out.Bytes(), err)
	}
	if werr != nil {
		return fmt.Errorf("%s: writing its input: %w", filepath.Base(r.restore), werr)
	}
	return nil
}

// Backend returns "nft" or "legacy", as "iptables --version" said.
func (r *ExecRunner) Backend() string { return r.backend }

// Save implements Runner.
func (r *ExecRunner) Save(ctx context.Context, table string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.save, "-t", table)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s: %w: %s", filepath.Base(r.save), table, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// EnsureJump implements Runner.
func (r *ExecRunner) EnsureJump(ctx context.Context, j Jump) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ok, err := r.ipt.Exists(j.Table, j.Chain, j.Rule...)
	if err != nil {
		return fmt.Errorf("check jump in %s %s: %w", j.Table, j.Chain, err)
	}
	if ok {
		return nil
	}
	if err := r.ipt.Insert(j.Table, j.Chain, 1, j.Rule...); err != nil {
		return fmt.Errorf("insert jump in %s %s: %w", j.Table, j.Chain, err)
	}
	return nil
}

// DeleteJump implements Runner.
func (r *ExecRunner) DeleteJump(ctx context.Context, j Jump) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := r.ipt.DeleteIfExists(j.Table, j.Chain, j.Rule...)
	var ie *goipt.Error
	if errors.As(err, &ie) && ie.IsNotExist() {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete jump in %s %s: %w", j.Table, j.Chain, err)
	}
	return nil
}

// ListChain implements Runner.
func (r *ExecRunner) ListChain(ctx context.Context, table, chain string) ([]string, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	lines, err := r.ipt.List(table, chain)
	var ie *goipt.Error
	// iptables-nft 1.8.9 calls a missing chain "incompatible".
	if errors.As(err, &ie) && (ie.IsNotExist() || strings.Contains(ie.Error(), "is incompatible")) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("list %s %s: %w", table, chain, err)
	}
	var rules []string
	for _, l := range lines {
		if strings.HasPrefix(l, "-A ") {
			rules = append(rules, l)
		}
	}
	return rules, true, nil
}

// GenerationOf returns how to read a number that every change to r's
// rules moves, or nil when r has none: the nftables ruleset generation
// for the nft backend (every iptables-nft commit moves it, as does any
// other nftables transaction in the namespace), a fingerprint of the
// kernel's summary of every loaded table for the legacy backend (a rule
// added, deleted or flushed moves it; a rule replaced by one of the same
// size does not), the fake's own count for a Runner that keeps one
// (FakeRunner). A canary reads it and lists rules only when it moved.
func GenerationOf(r Runner) func(context.Context) (uint32, error) {
	if n, ok := r.(interface {
		Generation(context.Context) (uint32, error)
	}); ok {
		return n.Generation
	}
	if e, ok := r.(*ExecRunner); ok && e.backend == "legacy" {
		return legacyGeneration(e.cfg.Family)
	}
	if b, ok := r.(interface{ Backend() string }); ok && b.Backend() == "nft" {
		return nfgen.Read
	}
	return nil
}
