package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/policy"
)

func TestPackingLine(t *testing.T) {
	const gpu80 = 80 << 30
	for _, tc := range []struct {
		name         string
		target, peak *resource.Quantity
		want         []string
	}{
		{"a little above half: two fit if ≤ 40Gi, peak leaves room", qp("42Gi"), qp("36Gi"), []string{"1 fit one 80Gi GPU", "2 fit if ≤ 40Gi", "leaves 4Gi"}},
		{"a third: three fit, four if ≤ 20Gi, not safe under the peak", qp("26Gi"), qp("22Gi"), []string{"3 fit one 80Gi GPU", "4 fit if ≤ 20Gi", "not safe"}},
		{"no peak", qp("30Gi"), nil, []string{"2 fit one 80Gi GPU", "3 fit if ≤ 27306Mi"}},
	} {
		got := packingLine(tc.target, tc.peak, gpu80)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
	}
	if got := packingLine(nil, qp("1Gi"), gpu80); got != "" {
		t.Errorf("no target: %q, want empty", got)
	}
}

// Issue 16 item 3 and issue 13 kind 5: explain names the smallest MIG profile that holds
// the recommendation and, for samples read on a MIG instance, the target against it.
func TestExplainMIG(t *testing.T) {
	cfg := policy.Config{}
	rec := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
		Target: gpufracv1.GPUResources{Memory: qp("10652Mi"), Compute: qp("165m")}}
	onMIG, advice := rec, rec
	onMIG.MIG = cfg.MIG(rec, "1g.10gb")
	advice.ContainerName = "side"
	advice.MIG = cfg.MIG(rec, "")
	got := explainDeployment(t, "small", onMIG, advice)
	wantContains(t, "explain", got,
		"MIG     measured on a 1g.10gb instance",
		"compute target 1155m of the instance (165m of the GPU)",
		"memory target 118% of the instance's memory",
		"         2g.20gb is the smallest A100/H100 80GB MIG profile that holds the target of 10652Mi and 165m of the GPU",
		"  MIG     2g.20gb is the smallest",
		"alternative to time-slicing",
	)
	if strings.Count(got, "2g.20gb is the smallest") != 2 || strings.Count(got, "measured on a") != 1 {
		t.Errorf("want advice for both containers and the instance line for the MIG one only:\n%s", got)
	}
}

// TestExplainYoungWorkload checks that explain says where a young workload's margin and
// confidence come from, and says nothing of it for a workload that is not young.
func TestExplainYoungWorkload(t *testing.T) {
	young := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
		ConfidencePercent: 50, HistoryHours: 3, YoungMarginPercent: 33,
		Target: gpufracv1.GPUResources{Memory: qp("15Gi"), Compute: qp("100m")}}
	old := young
	old.ContainerName, old.YoungMarginPercent, old.HistoryHours = "side", 0, 30
	got := explainDeployment(t, "new", young, old)
	wantContains(t, "explain", got, "young workload: + 33% margin (100/n, n hours its memory stayed at its highest level)")
	if strings.Count(got, "young workload") != 1 {
		t.Errorf("want the young-workload line for main only:\n%s", got)
	}
}

// TestExplainYoungShare: a young container whose memoryLimit is at its share of the GPU
// (contract.Target.YoungShare) is explained as written at that share, with the target
// shown as the need and no minMemory or burst-room line; a young container whose limit
// is under its share gets the burst-room line instead.
func TestExplainYoungShare(t *testing.T) {
	young := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
		ConfidencePercent: 50, HistoryHours: 3, YoungMarginPercent: 50,
		Target:     gpufracv1.GPUResources{Memory: qp("15Gi"), Compute: qp("100m")},
		UpperBound: gpufracv1.GPUResources{Memory: qp("20Gi"), Compute: qp("200m")}, MemoryLimit: qp("20Gi")}
	under := young
	under.ContainerName, under.MemoryLimit = "side", qp("18Gi")
	got := explainDeployment(t, "new", young, under)
	saysAndNot(t, "explain", got,
		[]string{"memory  target 15Gi", "young share 20Gi: the whole share of one GPU the target falls in", "limit 18Gi: burst room"},
		[]string{"minMemory", "limit 20Gi"})
	if strings.Count(got, "young share") != 1 {
		t.Errorf("want the young-share line for main only:\n%s", got)
	}
}

// explainDeployment is explain's output, for an 80 GiB GPU, of the autoscaler ml/name of
// the Deployment name whose recommendation holds recs.
func explainDeployment(t *testing.T, name string, recs ...gpufracv1.ContainerRecommendation) string {
	t.Helper()
	gfa := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
	gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name = "Deployment", name
	gfr := &gpufracv1.GPUFractionRecommendation{}
	gfr.Status.ContainerRecommendations = recs
	var out strings.Builder
	if err := explain(&out, gfa, gfr, 80<<30); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestExplainMemoryLimit checks that explain prints a container's memoryLimit as burst
// room the updater does not compare, and no limit line for a container without one.
func TestExplainMemoryLimit(t *testing.T) {
	spiky := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
		ConfidencePercent: 90, HistoryHours: 30, MemoryLimit: qp("30Gi"),
		Target: gpufracv1.GPUResources{Memory: qp("20Gi"), Compute: qp("100m")}}
	flat := spiky
	flat.ContainerName, flat.MemoryLimit = "side", nil
	got := explainDeployment(t, "web", spiky, flat)
	wantContains(t, "explain", got, "limit 30Gi: burst room above the target")
	wantContains(t, "explain", got, "the updater compares the target, not the limit")
	if strings.Count(got, "limit 30Gi") != 1 || strings.Count(got, "burst room") != 1 {
		t.Errorf("want one limit line, for main only:\n%s", got)
	}
}

// TestExplainNoCompute checks that a container without a compute target gets one line
// saying so, not a formula of dashes.
func TestExplainNoCompute(t *testing.T) {
	rec := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
		ConfidencePercent: 10, HistoryHours: 1, Target: gpufracv1.GPUResources{Memory: qp("512Mi")}}
	got := explainDeployment(t, "idle", rec)
	wantContains(t, "explain", got, "compute no target: no compute samples yet")
	if strings.Contains(got, "p90 of activity from -") {
		t.Errorf("a formula for a compute target that does not exist:\n%s", got)
	}
}

// TestExplainNoMemory: a container without a memory target gets one line saying so,
// not a formula of dashes, with or without an observed peak and compute target.
func TestExplainNoMemory(t *testing.T) {
	for _, c := range []struct {
		peak, compute *resource.Quantity
		want          string
	}{
		{nil, nil, "memory  no target: no memory samples yet, or the policy does not control memory (recent peak -)"},
		{nil, qp("300m"), "memory  no target: no memory samples yet"},
		{qp("12Gi"), qp("300m"), "(recent peak 12Gi)"},
	} {
		rec := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
			ConfidencePercent: 10, HistoryHours: 1, ObservedPeakMemory: c.peak, Target: gpufracv1.GPUResources{Compute: c.compute}}
		got := explainDeployment(t, "nomem", rec)
		wantContains(t, "explain", got, c.want)
		if strings.Contains(got, "target - =") || strings.Contains(got, "packing") {
			t.Errorf("a formula or packing for a memory target that does not exist:\n%s", got)
		}
	}
}

// TestBadFlagsFailFirst: explain's and report's bad flags fail before the cluster is
// read (here there is no cluster at all), with an error that starts with the flag (a
// --min-confidence outside 0–100 was taken, every workload then low-confidence or none;
// --since's missing or unusable --prometheus-url was found after reading the cluster).
func TestBadFlagsFailFirst(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"explain", "x", "--gpu-memory", "80G"}, "--gpu-memory"},
		{[]string{"explain", "x", "--gpu-memory", "80"}, "--gpu-memory"},
		{[]string{"explain", "x", "--gpu-memory", "lots"}, "--gpu-memory"},
		{[]string{"report", "--gpu-memory", "80G"}, "--gpu-memory"},
		{[]string{"report", "-o", "yaml"}, "--output"},
		{[]string{"report", "-o", "wide"}, "--output"},
		{[]string{"report", "--since", "a week"}, "--since"},
		{[]string{"report", "--annotation-memory-request", "peak"}, "--annotation-memory-request"},
		{[]string{"report", "--min-confidence", "150"}, "--min-confidence 150: want 0–100"},
		{[]string{"report", "--min-confidence", "-5"}, "--min-confidence -5: want 0–100"},
		{[]string{"report", "--since", "1h"}, "--since needs --prometheus-url"},
		{[]string{"report", "--since", "1h", "--prometheus-url", "prometheus:9090"}, "--prometheus-url \"prometheus:9090\": want an http(s) URL"},
	} {
		_, _, err := run(t, append(c.args, "--kubeconfig", none)...)
		if err == nil || !strings.HasPrefix(err.Error(), c.flag) {
			t.Errorf("%v: %v, want the error of %s", c.args, err, c.flag)
		}
	}
}

// TestExplainComputeRequest checks that explain prints a time-sliced container's
// computeRequest as what its pod reserves for placement, and no request line for a
// container without one.
func TestExplainComputeRequest(t *testing.T) {
	sliced := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
		ConfidencePercent: 90, HistoryHours: 30, ComputeRequest: qp("120m"),
		Target: gpufracv1.GPUResources{Memory: qp("20Gi"), Compute: qp("300m")}}
	mps := sliced
	mps.ContainerName, mps.SharingMode, mps.ComputeRequest = "side", gpufracv1.SharingModeMPS, nil
	got := explainDeployment(t, "web", sliced, mps)
	wantContains(t, "explain", got, "request 120m: the share of one GPU the time-sliced pod reserves for placement",
		"written as the pod's compute request with no limit")
	if strings.Count(got, "reserves for placement") != 1 {
		t.Errorf("want one request line, for main only:\n%s", got)
	}
}

// TestExplainDerivation: explain prints the percentiles, memory interval and compute
// margin the recommendation was derived with (recorded by the recommender from its
// settings and flags such as --compute-margin), not a fixed p90 and 15 %; a status
// written before they were recorded shows the recommender's defaults and says so.
func TestExplainDerivation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		d         *gpufracv1.Derivation
		want, not []string
	}{
		{"recorded defaults", &gpufracv1.Derivation{MemoryPercentile: *qp("900m"), MemoryInterval: metav1.Duration{Duration: time.Hour}, ComputePercentile: *qp("900m"), ComputeMargin: *qp("150m")},
			[]string{"max(p90 of per-pod peaks per 1h, recent peak", "p90 of activity from DCGM_FI_PROF_SM_ACTIVE + 15% margin"}, []string{"not recorded"}},
		{"--compute-margin 0.3, p95 of 30m peaks, p75 compute", &gpufracv1.Derivation{MemoryPercentile: *qp("950m"), MemoryInterval: metav1.Duration{Duration: 30 * time.Minute}, ComputePercentile: *qp("750m"), ComputeMargin: *qp("300m")},
			[]string{"max(p95 of per-pod peaks per 30m, recent peak", "p75 of activity from DCGM_FI_PROF_SM_ACTIVE + 30% margin"}, []string{"p90", "15% margin", "not recorded"}},
		{"fractional margin and percentile, 90m interval", &gpufracv1.Derivation{MemoryPercentile: *qp("975m"), MemoryInterval: metav1.Duration{Duration: 90 * time.Minute}, ComputePercentile: *qp("800m"), ComputeMargin: *qp("125m")},
			[]string{"max(p97.5 of per-pod peaks per 1h30m, recent peak", "p80 of activity from DCGM_FI_PROF_SM_ACTIVE + 12.5% margin"}, []string{"p90", "15% margin"}},
		{"no margin", &gpufracv1.Derivation{MemoryPercentile: *qp("900m"), MemoryInterval: metav1.Duration{Duration: time.Hour}, ComputePercentile: *qp("900m"), ComputeMargin: *qp("0")},
			[]string{"p90 of activity from DCGM_FI_PROF_SM_ACTIVE + 0% margin"}, []string{"15% margin"}},
		{"not recorded: the defaults, said so", nil,
			[]string{"max(p90 of per-pod peaks per 1h, recent peak", "p90 of activity from DCGM_FI_PROF_SM_ACTIVE + 15% margin", "not recorded"}, nil},
	} {
		rec := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
			ConfidencePercent: 90, HistoryHours: 30, ComputeSource: "DCGM_FI_PROF_SM_ACTIVE", Derivation: tc.d,
			Target: gpufracv1.GPUResources{Memory: qp("20Gi"), Compute: qp("300m")}}
		saysAndNot(t, tc.name, explainDeployment(t, "web", rec), tc.want, tc.not)
	}
}

// TestExplainMinMemory: where the autoscaler's minMemory raises a container above a
// recommendation that predates it, explain says so and reads the packing line at what
// the webhook writes (contract.WithPolicy, at most one GPU), not at the
// recommendation; a minMemory at or below the target says nothing.
func TestExplainMinMemory(t *testing.T) {
	for _, tc := range []struct {
		name, container, min string
		want, not            []string
	}{
		{"no policy", "", "", []string{"4 fit one 80Gi GPU at this target"}, []string{"minMemory"}},
		{"minMemory below the target", "main", "16Gi", []string{"4 fit one 80Gi GPU at this target"}, []string{"minMemory"}},
		{"minMemory 30Gi", "main", "30Gi", []string{"minMemory 30Gi of the container policy raises it: the webhook writes 30Gi", "2 fit one 80Gi GPU at this target"}, []string{"4 fit"}},
		{"minMemory 30Gi for every container", "*", "30Gi", []string{"the webhook writes 30Gi", "2 fit one 80Gi GPU"}, []string{"4 fit"}},
		{"minMemory above one GPU", "main", "100Gi", []string{"the webhook writes 80Gi", "1 fit one 80Gi GPU"}, []string{"4 fit"}},
		{"another container's minMemory", "side", "30Gi", []string{"4 fit one 80Gi GPU at this target"}, []string{"minMemory"}},
	} {
		gfa := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "web"}}
		gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name = "Deployment", "web"
		if tc.container != "" {
			gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: tc.container, MinMemory: qp(tc.min)}}}
		}
		gfr := &gpufracv1.GPUFractionRecommendation{}
		gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
			ConfidencePercent: 90, HistoryHours: 30, Target: gpufracv1.GPUResources{Memory: qp("20Gi"), Compute: qp("300m")}}}
		var out strings.Builder
		if err := explain(&out, gfa, gfr, 80<<30); err != nil {
			t.Fatal(err)
		}
		saysAndNot(t, tc.name, out.String(), tc.want, tc.not)
	}
}

// TestExplainNeedsAName: explain without a name, or with two, says what to pass, not
// cobra's bare "accepts 1 arg(s), received 0".
func TestExplainNeedsAName(t *testing.T) {
	for _, args := range [][]string{{"explain"}, {"explain", "-n", "ns"}, {"explain", "a", "b"}} {
		_, _, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "gpufrac explain NAME [-n NAMESPACE]") || strings.Contains(err.Error(), "arg(s)") {
			t.Errorf("%v: %v, want what to pass", args, err)
		}
	}
}

// TestNoKubeconfigNamesThePath: a KUBECONFIG naming no usable file is named with what is
// wrong with each of its paths, not reported as unset.
func TestNoKubeconfigNamesThePath(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing, missing2 := filepath.Join(dir, "missing"), filepath.Join(dir, "also-missing")
	for _, c := range []struct {
		env  string
		want []string
	}{
		{missing, []string{"KUBECONFIG=" + missing, missing + " does not exist"}},
		{missing + string(filepath.ListSeparator) + missing2, []string{missing + " does not exist", missing2 + " does not exist"}},
		{empty, []string{"KUBECONFIG=" + empty, empty + " holds no usable context"}},
	} {
		t.Setenv("KUBECONFIG", c.env)
		t.Setenv("KUBERNETES_SERVICE_HOST", "") // no in-cluster fallback
		for _, cmd := range [][]string{{"report"}, {"status", "-A"}, {"explain", "x"}} {
			_, _, err := run(t, cmd...)
			if err == nil || strings.Contains(err.Error(), "KUBECONFIG is not set") {
				t.Errorf("KUBECONFIG=%s %v: %v", c.env, cmd, err)
				continue
			}
			wantContains(t, fmt.Sprintf("KUBECONFIG=%s %v", c.env, cmd), err.Error(), c.want...)
		}
	}
}

// saysAndNot fails the test for each of want that got lacks and each of not it holds.
func saysAndNot(t *testing.T, name, got string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: lacks %q:\n%s", name, w, got)
		}
	}
	for _, w := range not {
		if strings.Contains(got, w) {
			t.Errorf("%s: says %q:\n%s", name, w, got)
		}
	}
}

// TestKubeconfigFlagNamedInItsErrors: a --kubeconfig that does not exist, is a
// directory, does not parse or holds no context is named in the error with the flag,
// in every command that reads the cluster; before, a missing one read "kubeconfig: stat
// ...", and an empty one "KUBECONFIG is not set ...: pass --kubeconfig", as if no flag
// had been given.
func TestKubeconfigFlagNamedInItsErrors(t *testing.T) {
	dir := t.TempDir()
	empty, bad := filepath.Join(dir, "empty"), filepath.Join(dir, "bad")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("not: [yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // no in-cluster fallback
	for _, c := range []struct{ path, why string }{
		{filepath.Join(dir, "missing"), "does not exist"},
		{dir, "is a directory"},
		{bad, "yaml"},
		{empty, "holds no usable context"},
	} {
		for _, cmd := range [][]string{{"report"}, {"status", "-A"}, {"explain", "x"}, {"plan"}} {
			_, _, err := run(t, append(cmd, "--kubeconfig", c.path)...)
			if err == nil {
				t.Errorf("%v --kubeconfig %s: no error", cmd, c.path)
				continue
			}
			saysAndNot(t, fmt.Sprintf("%v --kubeconfig %s", cmd, c.path), err.Error(),
				[]string{fmt.Sprintf("--kubeconfig %q", c.path), c.why}, []string{"KUBECONFIG is not set"})
		}
	}
}
