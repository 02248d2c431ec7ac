package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command: its arguments, output and exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vulncheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("C", ".", "the `folder` the modules are named relative to")
	db := fs.String("db", "", "a vulnerability database `folder` to use as it is, instead of the one built from "+vulndbModule)
	acceptedFile := fs.String("accepted", "accepted.txt", "the `file` of accepted findings")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: vulncheck [-C folder] [-db folder] [-accepted file] module-folder...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	modules := fs.Args()
	if len(modules) == 0 {
		fs.Usage()
		return 2
	}
	for i, m := range modules {
		modules[i] = filepath.Clean(m)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "vulncheck: %v\n", err)
		return 2
	}
	// go tool runs this module's tools; it is the working folder.
	toolDir, err := os.Getwd()
	if err != nil {
		return fail(err)
	}
	acc, err := loadAccepted(*acceptedFile)
	if err != nil {
		return fail(err)
	}
	for _, k := range acc.keys() {
		if !slices.Contains(modules, k.Module) {
			return fail(fmt.Errorf("%s accepts %s for %s, which is not checked", *acceptedFile, k.ID, k.Module))
		}
	}
	if *db == "" {
		if *db, err = buildDB(ctx, toolDir, stdout, stderr); err != nil {
			return fail(err)
		}
	}
	if *db, err = filepath.Abs(*db); err != nil {
		return fail(err)
	}
	status := 0
	for _, m := range modules {
		s, err := govulncheck(ctx, toolDir, filepath.Join(*root, m), *db)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", m, err))
		}
		v := judge(m, s, acc)
		v.write(stdout, s)
		if len(v.Failures) > 0 {
			status = 1
		}
	}
	return status
}

func loadAccepted(name string) (accepted, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAccepted(f, name)
}

// buildDB returns the database built from the pinned vulndb module,
// building it into the user's cache directory the first time.
func buildDB(ctx context.Context, toolDir string, stdout, log io.Writer) (string, error) {
	src, err := downloadVulndb(ctx, toolDir)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("vulnerability database cache: %w", err)
	}
	dir := cachedDBDir(cache, src.Version)
	if err := ensureDB(ctx, src, dir, goToolIndexdb(toolDir, log)); err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "vulncheck: the vulnerability database of %s@%s, in %s\n", vulndbModule, src.Version, dir)
	return dir, nil
}

// govulncheck runs the pinned govulncheck over every package of the module
// in dir against the database in db.
func govulncheck(ctx context.Context, toolDir, dir, db string) (*scan, error) {
	cmd := exec.CommandContext(ctx, "go", "tool", "govulncheck", "-C", dir, "-db", "file://"+db, "-format", "json", "./...")
	cmd.Dir = toolDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// In JSON mode govulncheck exits 0 whatever it finds: a failure is
	// one to scan at all.
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("govulncheck: %w\n%s", err, stderr.Bytes())
	}
	return readScan(&stdout)
}
