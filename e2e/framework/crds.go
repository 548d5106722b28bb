package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/yaml"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// InstallCRDs adds gpufrac's API types and the CRD type to c.Scheme, creates every CRD
// in dir (gpufrac's are in <repo>/charts/gpufrac/crds; one already there is kept) and
// waits up to 30s until the API server serves GPUFractionAutoscalers and
// GPUFractionRecommendations. It errors when dir holds no YAML file, a file is not a
// CRD, a create fails or the types are not served in time.
func (c *Cluster) InstallCRDs(ctx context.Context, dir string) error {
	if err := gpufracv1.AddToScheme(c.Scheme); err != nil {
		return err
	}
	if err := apiextensionsv1.AddToScheme(c.Scheme); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := c.Client.Create(ctx, &crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var l gpufracv1.GPUFractionAutoscalerList
		var r gpufracv1.GPUFractionRecommendationList
		if c.Client.List(ctx, &l) == nil && c.Client.List(ctx, &r) == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("CRDs not served after 30s")
}
