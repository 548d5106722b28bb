package manager

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/gpufrac/gpufrac/internal/served"
)

// Optional is a controller that runs only when the API server serves its kind: a
// cluster without its CRD keeps the rest of the binary (the recommender without the
// GPUSharingPolicy CRD keeps recommending).
type Optional struct {
	// Name names the controller in logs.
	Name string
	// Kind is the kind it reconciles; it is served when the RESTMapper maps it.
	Kind schema.GroupVersionKind
	// Setup registers the controller (and its metrics) with the manager.
	Setup func(ctrl.Manager) error
}

// AddOptional sets c up on mgr when mapper serves c.Kind and reports whether it did. A
// kind mapper does not know (meta.IsNoMatchError) is logged and skipped, without error.
// Errors: any other mapping error (discovery failed: whether the kind is served is
// unknown, so the start fails and is retried rather than running without the
// controller for the life of the process), and Setup's, both naming the controller.
func AddOptional(mgr ctrl.Manager, mapper meta.RESTMapper, c Optional) (bool, error) {
	ok, err := served.Kind(mapper, c.Kind)
	if err != nil {
		return false, fmt.Errorf("%s: %w", c.Name, err)
	}
	if !ok {
		klog.InfoS("Kind not served (CRD not installed): optional controller off", "controller", c.Name, "kind", c.Kind.String())
		return false, nil
	}
	if err := c.Setup(mgr); err != nil {
		return false, fmt.Errorf("%s: %w", c.Name, err)
	}
	return true, nil
}
