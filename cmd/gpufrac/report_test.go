package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func rec(name string, pods int32, mem, cpu string, mode gpufracv1.SharingMode, provided bool) gpufracv1.GPUFractionRecommendation {
	r := gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	m, c := resource.MustParse(mem), resource.MustParse(cpu)
	r.Status.MatchedPods, r.Status.Memory, r.Status.Compute, r.Status.SharingMode = pods, &m, &c, mode
	r.Status.ConfidencePercent = ptr.To[int32](80)
	s := metav1.ConditionFalse
	if provided {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionRecommendationProvided, Status: s, Reason: "x"})
	return r
}

func TestSummarise(t *testing.T) {
	items := []gpufracv1.GPUFractionRecommendation{
		rec("a", 2, "30Gi", "300m", gpufracv1.SharingModeTimeSlicing, true),  // two pods: 60Gi, 600m → one GPU
		rec("b", 1, "40Gi", "500m", gpufracv1.SharingModeTimeSlicing, true),  // 40Gi does not fit next to 60Gi → second GPU
		rec("c", 1, "10Gi", "100m", gpufracv1.SharingModeExclusive, true),    // exclusive: a GPU of its own
		rec("d", 1, "10Gi", "100m", gpufracv1.SharingModeTimeSlicing, false), // no recommendation: keeps its GPU
	}
	rows, tot := summarise(items, nil, 80<<30, 50, true)
	if len(rows) != 4 || tot.Pods != 5 || tot.GPUsToday != 5 || tot.GPUsNeeded != 4 {
		t.Fatalf("rows %d pods %d today %d needed %d, want 4 5 5 4", len(rows), tot.Pods, tot.GPUsToday, tot.GPUsNeeded)
	}
	var b bytes.Buffer
	if err := writeReport(&b, rows, tot, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "5 today at one per pod → 4 packed") || !strings.Contains(b.String(), "no recommendation yet") {
		t.Errorf("report:\n%s", b.String())
	}
}

// The pod's observed peak adds up like its target: an init container counts as the
// largest of itself and the running containers, not on top of them.
func TestSummarisePeakWithInitContainer(t *testing.T) {
	r := rec("a", 1, "20Gi", "300m", gpufracv1.SharingModeTimeSlicing, true)
	peak := func(name string, typ gpufracv1.ContainerType, q string) gpufracv1.ContainerRecommendation {
		return gpufracv1.ContainerRecommendation{ContainerName: name, ContainerType: typ, ObservedPeakMemory: ptr.To(resource.MustParse(q)), SharingModeReason: name}
	}
	r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{
		peak("main", gpufracv1.ContainerTypeRegular, "12Gi"), peak("tokenizer", gpufracv1.ContainerTypeSidecar, "4Gi"), peak("warmup", gpufracv1.ContainerTypeInit, "6Gi"),
	}
	rows, _ := summarise([]gpufracv1.GPUFractionRecommendation{r}, nil, 80<<30, 50, true)
	if p := rows[0].ObservedPeakBytes; p == nil || *p != 16<<30 {
		t.Errorf("peak %v bytes, want 16 GiB (main + tokenizer; the 6Gi init container runs before them)", ptr.Deref(p, -1))
	}
	if rows[0].Reason != "tokenizer" {
		t.Errorf("reason from %q, want a running container's", rows[0].Reason)
	}
}

// TestSummariseByRequest: by default pods are packed by the memory request the
// annotations backend writes (the observed peak, with a young workload's margin, where
// below the target); --annotation-memory-request=none packs by the target.
func TestSummariseByRequest(t *testing.T) {
	r := rec("a", 2, "45Gi", "100m", gpufracv1.SharingModeTimeSlicing, true)
	r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main",
		Target: gpufracv1.GPUResources{Memory: ptr.To(resource.MustParse("45Gi"))}, ObservedPeakMemory: ptr.To(resource.MustParse("36Gi")), YoungMarginPercent: 5}}
	rows, byReq := summarise([]gpufracv1.GPUFractionRecommendation{r}, nil, 80<<30, 50, true)
	if want := int64(36<<30) * 105 / 100; ptr.Deref(rows[0].MemoryRequestBytes, -1) != want || byReq.GPUsNeeded != 1 {
		t.Errorf("by request: request %d, GPUs %d; want %d (36Gi × 1.05) and 1 (two fit 80Gi)", ptr.Deref(rows[0].MemoryRequestBytes, -1), byReq.GPUsNeeded, want)
	}
	if _, byTarget := summarise([]gpufracv1.GPUFractionRecommendation{r}, nil, 80<<30, 50, false); byTarget.GPUsNeeded != 2 {
		t.Errorf("by target: %d GPUs, want 2 (two 45Gi targets do not fit 80Gi)", byTarget.GPUsNeeded)
	}
}

// TestReportLimitRequest: report prints the pod's memory limit (GiB) where the
// recommendation has a memoryLimit and its compute request (milli-GPU), "-" for either
// where there is none, and leaves both out of the JSON row then.
func TestReportLimitRequest(t *testing.T) {
	burst := rec("burst", 1, "24Gi", "300m", gpufracv1.SharingModeTimeSlicing, true)
	burst.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{
		{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing, MemoryLimit: qp("30Gi"), ComputeRequest: qp("120m"),
			Target: gpufracv1.GPUResources{Memory: qp("20Gi"), Compute: qp("250m")}},
		{ContainerName: "side", SharingMode: gpufracv1.SharingModeTimeSlicing, ComputeRequest: qp("30m"),
			Target: gpufracv1.GPUResources{Memory: qp("4Gi"), Compute: qp("50m")}},
	}
	flat := rec("flat", 1, "10Gi", "400m", gpufracv1.SharingModeMPS, true)
	flat.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeMPS,
		Target: gpufracv1.GPUResources{Memory: qp("10Gi"), Compute: qp("400m")}}}
	rows, tot := summarise([]gpufracv1.GPUFractionRecommendation{burst, flat}, nil, 80<<30, 50, true)
	if rows[0].MemoryLimitBytes != 34<<30 || rows[0].ComputeRequestMilli != 150 {
		t.Errorf("burst: limit %d bytes, request %dm; want 34Gi (30Gi limit + 4Gi target) and 150m", rows[0].MemoryLimitBytes, rows[0].ComputeRequestMilli)
	}
	var b bytes.Buffer
	if err := writeReport(&b, rows, tot, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	wantContains(t, "report header", lines[0], "MEMORY GiB  LIMIT GiB  COMPUTE  COMPUTE REQUEST")
	for i, want := range [][]string{{"24.0", "34.0", "300m", "150m"}, {"10.0", "-", "400m", "-"}} {
		if got := strings.Fields(lines[i+1])[4:8]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: memory, limit, compute, request %q, want %q", rows[i].Name, got, want)
		}
	}
	js, err := json.Marshal(rows[1])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "memoryLimitBytes") || strings.Contains(string(js), "computeRequestMilli") {
		t.Errorf("flat: %s; want no memoryLimitBytes or computeRequestMilli", js)
	}
}

// TestReportYoungShareLimit: a young workload written at its share of one GPU (its upper
// bound, with a memoryLimit at or above it) gets that limit however the share compares
// with the written target: the report's LIMIT column shows it, not "-" (the limit is
// not the memory target shown beside it, which is the need).
func TestReportYoungShareLimit(t *testing.T) {
	for _, limit := range []string{"80Gi", "96Gi"} {
		young := rec("young", 1, "55Gi", "100m", gpufracv1.SharingModeTimeSlicing, true)
		young.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
			YoungMarginPercent: 20, MemoryLimit: qp(limit), ObservedPeakMemory: qp("39Gi"),
			Target: gpufracv1.GPUResources{Memory: qp("55Gi")}, UpperBound: gpufracv1.GPUResources{Memory: qp("80Gi")}}}
		if young.Status.ContainerRecommendations[0].YoungShare() == nil {
			t.Fatal("the recommendation is not young at its share: the test sets it up wrong")
		}
		rows, _ := summarise([]gpufracv1.GPUFractionRecommendation{young}, nil, 141<<30, 50, true)
		want := resource.MustParse(limit)
		if rows[0].MemoryLimitBytes != want.Value() {
			t.Errorf("memoryLimit %s: limit %d bytes, want %d (the memoryLimit, at least the 80Gi share)", limit, rows[0].MemoryLimitBytes, want.Value())
		}
	}
}

// TestSummarisePacksWrittenCompute: pods are packed by the compute the admission
// webhook writes, as the simulator places them: a time-sliced container by its
// placement-only computeRequest (its compute target is not written), a container whose
// recommendation partitions compute (MPS) by its compute target.
func TestSummarisePacksWrittenCompute(t *testing.T) {
	sliced := func(request string) gpufracv1.GPUFractionRecommendation {
		r := rec("sliced", 2, "10Gi", "600m", gpufracv1.SharingModeTimeSlicing, true)
		r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
			ComputeRequest: qp(request), Target: gpufracv1.GPUResources{Memory: qp("10Gi"), Compute: qp("600m")}}}
		return r
	}
	for _, c := range []struct {
		request string
		gpus    int
	}{{"200m", 1}, {"600m", 2}} {
		_, tot := summarise([]gpufracv1.GPUFractionRecommendation{sliced(c.request)}, nil, 80<<30, 50, true)
		if tot.GPUsNeeded != c.gpus || tot.GPUsNeededConfident != c.gpus {
			t.Errorf("two time-sliced pods, target 600m, computeRequest %s: %d GPUs (%d once confident), want %d", c.request, tot.GPUsNeeded, tot.GPUsNeededConfident, c.gpus)
		}
	}
	_, tot := summarise([]gpufracv1.GPUFractionRecommendation{sliced("200m")}, nil, 80<<30, 50, true)
	if want := 400.0 / 1000; ptr.Deref(tot.ComputeUtilisationPacked, -1) != want {
		t.Errorf("compute packed %.3f of the GPUs held, want %.3f (2 × 200m written on one GPU)", ptr.Deref(tot.ComputeUtilisationPacked, -1), want)
	}
	mps := rec("mps", 2, "10Gi", "600m", gpufracv1.SharingModeMPS, true)
	mps.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeMPS,
		ComputeRequest: qp("200m"), Target: gpufracv1.GPUResources{Memory: qp("10Gi"), Compute: qp("600m")}}}
	if _, tot := summarise([]gpufracv1.GPUFractionRecommendation{mps}, nil, 80<<30, 50, true); tot.GPUsNeeded != 2 {
		t.Errorf("two MPS pods of 600m: %d GPUs, want 2 (partitioned compute is reserved)", tot.GPUsNeeded)
	}
}

// TestReportNoDataIsNotZero: a value the recommendation does not have prints as "-" in
// the table and null in JSON, never as 0, and a pod without a memory target keeps a
// whole GPU in the packing instead of being packed as 0 bytes.
func TestReportNoDataIsNotZero(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(r *gpufracv1.GPUFractionRecommendation)
		// cols are the table's PEAK GiB, MEMORY GiB, COMPUTE and CONFIDENCE cells;
		// nulls the JSON fields that must be null.
		cols  []string
		nulls []string
		// gpus: GPUs needed for two pods of the workload next to a 10Gi pod.
		gpus int
	}{
		{"no recommendation yet", func(r *gpufracv1.GPUFractionRecommendation) {
			r.Status = gpufracv1.GPUFractionRecommendationStatus{MatchedPods: 2}
		}, []string{"-", "-", "-", "-"}, []string{"observedPeakBytes", "memoryBytes", "memoryRequestBytes", "computeMilli", "confidencePercent"}, 3},
		{"no compute samples", func(r *gpufracv1.GPUFractionRecommendation) {
			r.Status.Compute = nil
		}, []string{"20.0", "24.0", "-", "80%"}, []string{"computeMilli"}, 1},
		{"no observed peak", func(r *gpufracv1.GPUFractionRecommendation) {
			for i := range r.Status.ContainerRecommendations {
				r.Status.ContainerRecommendations[i].ObservedPeakMemory = nil
			}
		}, []string{"-", "24.0", "300m", "80%"}, []string{"observedPeakBytes"}, 1},
		{"no confidence", func(r *gpufracv1.GPUFractionRecommendation) {
			r.Status.ConfidencePercent = nil
		}, []string{"20.0", "24.0", "300m", "-"}, []string{"confidencePercent"}, 3}, // no confidence: not applied
		{"no memory target", func(r *gpufracv1.GPUFractionRecommendation) {
			r.Status.Memory = nil
			for i := range r.Status.ContainerRecommendations {
				r.Status.ContainerRecommendations[i].Target.Memory = nil
			}
		}, []string{"20.0", "-", "300m", "80%"}, []string{"memoryBytes", "memoryRequestBytes"}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rec("w", 2, "24Gi", "300m", gpufracv1.SharingModeTimeSlicing, true)
			r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
				ObservedPeakMemory: qp("20Gi"), Target: gpufracv1.GPUResources{Memory: qp("24Gi"), Compute: qp("300m")}}}
			c.edit(&r)
			small := rec("x-small", 1, "10Gi", "100m", gpufracv1.SharingModeTimeSlicing, true)
			rows, tot := summarise([]gpufracv1.GPUFractionRecommendation{r, small}, nil, 80<<30, 50, false)
			if tot.GPUsNeeded != c.gpus {
				t.Errorf("GPUs needed %d, want %d", tot.GPUsNeeded, c.gpus)
			}
			var b bytes.Buffer
			if err := writeReport(&b, rows, tot, false); err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(strings.Split(b.String(), "\n")[1])
			if got := []string{f[3], f[4], f[6], f[9]}; strings.Join(got, " ") != strings.Join(c.cols, " ") {
				t.Errorf("peak, memory, compute, confidence %q, want %q:\n%s", got, c.cols, b.String())
			}
			js, err := json.Marshal(rows[0])
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(js, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range c.nulls {
				if v, ok := m[k]; !ok || v != nil {
					t.Errorf("%s = %v (present %v), want null: %s", k, v, ok, js)
				}
			}
		})
	}
}

// TestReportNoPods: with no pods there are no GPUs to compare; the utilisations are null
// and the text says so instead of 0 %.
func TestReportNoPods(t *testing.T) {
	for _, items := range [][]gpufracv1.GPUFractionRecommendation{nil, {rec("idle", 0, "10Gi", "100m", gpufracv1.SharingModeTimeSlicing, true)}} {
		rows, tot := summarise(items, nil, 80<<30, 50, true)
		var b bytes.Buffer
		if err := writeReport(&b, rows, tot, false); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "no pods: no GPUs held today") || strings.Contains(b.String(), "% of memory") || strings.Contains(b.String(), "% fewer") {
			t.Errorf("%d workloads:\n%s", len(items), b.String())
		}
		if tot.MemoryUtilisationToday != nil || tot.MemoryUtilisationPacked != nil || tot.ComputeUtilisationToday != nil || tot.ComputeUtilisationPacked != nil {
			t.Errorf("utilisation with no pods: %+v, want nil", tot)
		}
	}
}

// TestReportMinMemory: where the autoscaler's minMemory raises a container above a
// recommendation that predates it, the report totals what the webhook writes
// (contract.WithPolicy: the floor, at most one GPU, and no observed-peak request
// under it), not the recommendation: GPUs needed and savings are not over-stated. A
// minMemory at or below the target, or another autoscaler's, changes nothing.
func TestReportMinMemory(t *testing.T) {
	const gi = int64(1) << 30
	r := rec("web", 4, "14Gi", "200m", gpufracv1.SharingModeTimeSlicing, true)
	r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{
		{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing, ObservedPeakMemory: qp("8Gi"), Target: gpufracv1.GPUResources{Memory: qp("10Gi")}},
		{ContainerName: "side", SharingMode: gpufracv1.SharingModeTimeSlicing, ObservedPeakMemory: qp("2Gi"), Target: gpufracv1.GPUResources{Memory: qp("4Gi")}},
	}
	for _, tc := range []struct {
		name, gfaName, container, min string
		memory, request               int64 // the pod's, bytes
		gpus, gpusByTarget            int
	}{
		{"no autoscaler policy", "", "", "", 14 * gi, 10 * gi, 1, 1},
		{"minMemory below the target", "web", "main", "5Gi", 14 * gi, 10 * gi, 1, 1},
		{"minMemory 30Gi raises main", "web", "main", "30Gi", 34 * gi, 32 * gi, 2, 2},
		{"minMemory 30Gi for every container", "web", "*", "30Gi", 60 * gi, 60 * gi, 4, 4},
		{"minMemory 50Gi", "web", "main", "50Gi", 54 * gi, 52 * gi, 4, 4},
		{"minMemory above one GPU: one GPU", "web", "main", "100Gi", 84 * gi, 82 * gi, 4, 4},
		{"another autoscaler's minMemory", "other", "main", "30Gi", 14 * gi, 10 * gi, 1, 1},
	} {
		var gfas []gpufracv1.GPUFractionAutoscaler
		if tc.gfaName != "" {
			g := gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: tc.gfaName}}
			g.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: tc.container, MinMemory: qp(tc.min)}}}
			gfas = append(gfas, g)
		}
		rows, tot := summarise([]gpufracv1.GPUFractionRecommendation{r}, gfas, 80<<30, 50, true)
		if got, req := ptr.Deref(rows[0].MemoryBytes, -1), ptr.Deref(rows[0].MemoryRequestBytes, -1); got != tc.memory || req != tc.request || tot.GPUsNeeded != tc.gpus {
			t.Errorf("%s: memory %.1f GiB, request %.1f GiB, %d GPUs; want %.1f, %.1f, %d", tc.name, float64(got)/float64(gi), float64(req)/float64(gi), tot.GPUsNeeded,
				float64(tc.memory)/float64(gi), float64(tc.request)/float64(gi), tc.gpus)
		}
		if _, tot := summarise([]gpufracv1.GPUFractionRecommendation{r}, gfas, 80<<30, 50, false); tot.GPUsNeeded != tc.gpusByTarget {
			t.Errorf("%s, packed by target: %d GPUs, want %d", tc.name, tot.GPUsNeeded, tc.gpusByTarget)
		}
	}
}

// TestNoArgsCommandsRefuseArguments: report, status, plan, simulate and trace import
// and synth take no argument; one given (a workload's name, a namespace without -n, a
// trace file without --input, a bool flag's value apart) is an error saying what to
// write, before the cluster or the trace is read. Before, it was ignored: gpufrac report sd-000 reported
// every workload and gpufrac status ml the kubeconfig context's namespace.
func TestNoArgsCommandsRefuseArguments(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none")) // a read of the cluster fails otherwise
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "sd-000"}, `report takes no arguments, got "sd-000": -n NAMESPACE`},
		{[]string{"status", "ml"}, `status takes no arguments, got "ml": -n NAMESPACE`},
		{[]string{"plan", "pool-a", "pool-b"}, `plan takes no arguments, got "pool-a pool-b"`},
		// cobra said 'unknown command "false" for "gpufrac simulate"'.
		{[]string{"simulate", "--format", "synthetic", "--urgent-growth", "false"}, `unexpected argument "false": a bool flag takes its value with =, --urgent-growth=false`},
		{[]string{"simulate", "--format", "synthetic", "--urgent-growth", "--young-evidence", "false"}, `unexpected argument "false": a bool flag takes its value with =, --urgent-growth=false or --young-evidence=false`},
		{[]string{"simulate", "trace.csv"}, `simulate takes no arguments, got "trace.csv": the trace is given with --input`},
		{[]string{"trace", "import", "trace.csv"}, `import takes no arguments, got "trace.csv": the trace is given with --input`},
		{[]string{"trace", "synth", "out.om"}, `synth takes no arguments, got "out.om": the outputs are given with --output`},
	} {
		_, _, err := run(t, c.args...)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error starting %q", c.args, err, c.want)
		}
	}
}
