package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The chart tests render charts/gpufrac with bin/helm (built from tools/helm when
// missing), let the real test API server validate every object with a server-side dry
// run (the Prometheus Operator and cert-manager CRDs of e2e/testdata/crds installed), and
// install the rendered RBAC to check each component's permissions with
// `kubectl auth can-i`. helm lint and promtool's tests of rules/ run once, in `make
// verify`, not here. One file per concern; this one holds the shared helpers:
//
//	chart_values_test.go  values schema, every value documented
//	chart_dryrun_test.go  server-side dry run, webhook configurations
//	chart_rbac_test.go    RBAC with kubectl auth can-i
//	chart_rules_test.go   alert runbooks and tests, rendered rules, dashboard queries
//	chart_live_test.go    the binaries with the chart's arguments, live as its service accounts

// chartValueSets are the CI values files of the chart.
var chartValueSets = []string{"default", "all-on", "simulate"}

// helmLDFlags mirror the Makefile's $(BIN)/helm recipe.
const helmLDFlags = "-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0 -X helm.sh/helm/v3/internal/version.gitTreeState=clean " +
	"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37 " +
	"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37"

var (
	helmOnce sync.Once
	helmErr  error
	crdsOnce sync.Once
	crdsErr  error
)

func chartDir() string { return filepath.Join(repoRoot, "charts", "gpufrac") }

// helmBin returns bin/helm, building it from the tools/helm module first if it is missing.
func helmBin(t testing.TB) string {
	t.Helper()
	path := filepath.Join(repoRoot, "bin", "helm")
	helmOnce.Do(func() {
		if _, err := os.Stat(path); err == nil {
			return
		}
		t.Logf("building %s from tools/helm (first time only)", path)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", helmLDFlags, "-o", path, "helm.sh/helm/v3/cmd/helm")
		cmd.Dir = filepath.Join(repoRoot, "tools", "helm")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("building helm: %v\n%s", err, out)
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return path
}

// chartExec runs a command with stdin and returns its stdout; the error carries stderr.
func chartExec(stdin []byte, name string, args ...string) (string, error) {
	stdout, _, err := chartExec2(stdin, name, args...)
	return stdout, err
}

// chartExec2 is chartExec returning stderr (warnings) too.
func chartExec2(stdin []byte, name string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = repoRoot
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// kubectl runs kubectl against the test cluster as its admin.
func chartKubectl(stdin []byte, args ...string) (string, error) {
	return chartExec(stdin, "kubectl", append([]string{"--kubeconfig=" + testCluster.Kubeconfig}, args...)...)
}

// chartTemplate renders the chart with one of its ci/ values files plus --set flags.
func chartTemplate(t testing.TB, release, ns, values string, set ...string) []byte {
	t.Helper()
	args := []string{"template", release, chartDir(), "--namespace", ns,
		"-f", filepath.Join(chartDir(), "ci", values+"-values.yaml")}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := chartExec(nil, helmBin(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(out)
}

// chartObjects splits rendered manifests into objects.
func chartObjects(t testing.TB, manifests []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decoding rendered manifests: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// chartYAML joins objects back into one multi-document stream.
func chartYAML(t testing.TB, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes()
}

// installChartCRDs installs the third-party CRDs the chart's optional objects need.
func installChartCRDs(t testing.TB) {
	t.Helper()
	crdsOnce.Do(func() {
		dir := filepath.Join(repoRoot, "e2e", "testdata", "crds")
		if _, crdsErr = chartKubectl(nil, "apply", "--server-side", "--field-manager=e2e", "-f", dir); crdsErr != nil {
			return
		}
		_, crdsErr = chartKubectl(nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", dir)
	})
	if crdsErr != nil {
		t.Fatal(crdsErr)
	}
}
