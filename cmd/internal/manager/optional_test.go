package manager

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
)

var policyKind = schema.GroupVersionKind{Group: "autoscaling.gpufrac.io", Version: "v1alpha1", Kind: "GPUSharingPolicy"}

// failingMapper fails every mapping as discovery does when the API server is down.
type failingMapper struct{ meta.RESTMapper }

func (failingMapper) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, errors.New("the server is currently unable to handle the request")
}

func TestAddOptional(t *testing.T) {
	served := meta.NewDefaultRESTMapper([]schema.GroupVersion{policyKind.GroupVersion()})
	served.Add(policyKind, meta.RESTScopeRoot)
	otherVersion := meta.NewDefaultRESTMapper(nil)
	otherVersion.Add(policyKind.GroupVersion().WithKind("Other"), meta.RESTScopeRoot)
	otherVersion.Add(schema.GroupVersionKind{Group: policyKind.Group, Version: "v1beta1", Kind: policyKind.Kind}, meta.RESTScopeRoot)
	setupErr := errors.New("setup refused")

	for _, tc := range []struct {
		name      string
		mapper    meta.RESTMapper
		setupErr  error
		wantAdded bool
		wantSetup int
		wantErr   string
	}{
		{name: "served", mapper: served, wantAdded: true, wantSetup: 1},
		{name: "no CRD", mapper: meta.NewDefaultRESTMapper(nil)},
		{name: "group served, not this version", mapper: otherVersion},
		{name: "discovery failing", mapper: failingMapper{}, wantErr: "sharing-planner: is autoscaling.gpufrac.io/v1alpha1, Kind=GPUSharingPolicy served: the server is currently unable"},
		{name: "setup failing", mapper: served, setupErr: setupErr, wantSetup: 1, wantErr: "sharing-planner: setup refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			added, err := AddOptional(nil, tc.mapper, Optional{
				Name: "sharing-planner",
				Kind: policyKind,
				Setup: func(ctrl.Manager) error {
					calls++
					return tc.setupErr
				},
			})
			if added != tc.wantAdded || calls != tc.wantSetup {
				t.Errorf("added %v after %d Setup calls, want %v after %d", added, calls, tc.wantAdded, tc.wantSetup)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one starting %q", err, tc.wantErr)
			}
			if tc.setupErr != nil && !errors.Is(err, tc.setupErr) {
				t.Errorf("error %v does not wrap Setup's", err)
			}
		})
	}
}
