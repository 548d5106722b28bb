package framework

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	if err := c.CreateCRDs(ctx, 30*time.Second, files...); err != nil {
		return err
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

// CreateCRDs creates every CustomResourceDefinition in files (YAML, several documents
// per file allowed; one that already exists is kept) and waits up to timeout until each
// is Established. It errors on a document that is not a strict v1 CRD, on a refused
// create, or when a CRD is not Established in time.
func (c *Cluster) CreateCRDs(ctx context.Context, timeout time.Duration, files ...string) error {
	if err := apiextensionsv1.AddToScheme(c.Scheme); err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 || bytes.Equal(bytes.TrimSpace(doc), []byte("---")) {
				continue
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if err := c.Client.Create(ctx, &crd); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no CRDs in %v", files)
	}
	var pending string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			var crd apiextensionsv1.CustomResourceDefinition
			lastErr = c.Client.Get(ctx, types.NamespacedName{Name: name}, &crd)
			if lastErr != nil || !established(&crd) {
				pending = name
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not Established after %v (last error: %v): %w", pending, timeout, lastErr, err)
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
