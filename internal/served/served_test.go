package served

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type failingMapper struct{ meta.RESTMapper }

func (failingMapper) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, errors.New("the server is currently unable to handle the request")
}

// TestKind: a mapped kind is served, an unknown one is not (no error), and a discovery
// failure is an error naming the kind.
func TestKind(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "autoscaling.gpufrac.io", Version: "v1alpha1", Kind: "GPUSharingPolicy"}
	m := meta.NewDefaultRESTMapper(nil)
	if ok, err := Kind(m, gvk); ok || err != nil {
		t.Errorf("unknown kind: %v %v, want false without error", ok, err)
	}
	m.Add(gvk, meta.RESTScopeRoot)
	if ok, err := Kind(m, gvk); !ok || err != nil {
		t.Errorf("mapped kind: %v %v, want true", ok, err)
	}
	if ok, err := Kind(failingMapper{}, gvk); ok || err == nil || !strings.Contains(err.Error(), "GPUSharingPolicy") {
		t.Errorf("failing discovery: %v %v, want an error naming the kind", ok, err)
	}
}
