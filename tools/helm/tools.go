//go:build tools

// Package tools pins the Helm command built by `make helm` (bin/helm), used to lint and
// render charts/gpufrac in CI and in the e2e chart test.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
