// Package scheme builds the runtime.Scheme of gpufrac's API clients: Kubernetes'
// built-in types and gpufrac's API, so that the daemons, the kubectl plugin and the
// tests' fake clients decode the same kinds.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// New returns a new scheme with Kubernetes' built-in types (client-go's scheme) and
// gpufrac's API (api/v1alpha1). Its error is a registration conflict, a programming
// error.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := gpufracv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// MustNew is New for tests and other callers that cannot go on without a scheme: it
// panics on New's error, a programming error.
func MustNew() *runtime.Scheme {
	s, err := New()
	if err != nil {
		panic(err)
	}
	return s
}
