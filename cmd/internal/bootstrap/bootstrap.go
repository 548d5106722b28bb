// Package bootstrap is what every gpufrac daemon's main does around its own work: the
// exit path of a failed run and comma-separated list flags. It imports no
// controller-runtime package on purpose: controller-runtime's client config registers a
// --kubeconfig flag when imported, and the node agent (cmd/agent) defines its own.
// The controller-runtime manager of the recommender and the updater is built by
// cmd/internal/manager.
package bootstrap

import (
	"os"
	"strings"

	"k8s.io/klog/v2"
)

// Main runs run and, when it returns an error, logs it as "<component> failed", flushes
// klog and exits with status 1. It returns when run succeeds.
func Main(component string, run func() error) {
	if err := run(); err != nil {
		klog.ErrorS(err, component+" failed")
		klog.Flush()
		os.Exit(1)
	}
}

// SplitList splits a comma-separated flag value into its non-empty, space-trimmed
// items; an empty value is no items.
func SplitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
