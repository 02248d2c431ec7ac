// Package report keeps the results of many runs of the upstream suite and
// writes REPORT.md from them.
//
// Each run (a proxy in one mode, on a cluster of one, two or three nodes)
// is stored as one JSON file under test/e2e/results, named
// "<nodes>node-<program>-<mode>.json" (Run.FileName), holding the
// condensed suite.Result and no test output; a later run of the same
// proxy, mode and node count replaces only its own file. Markdown renders
// the report from every stored run: a header (latest date, commits,
// machine), a summary per node count, the tests × runs table with
// kube-proxy's columns beside proxykit's for each node count, each
// failure's message, the differences from kube-proxy that a mode's
// documented semantics explain (Explanations) and those nothing explains,
// and the tests that cannot run here (suite.Unrunnables,
// suite.NodesNeeded).
package report
