//go:build tools

// Package tools pins VPA's admission controller, built by `make bench-webhook`.
package tools

import (
	_ "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller"
)
