package main

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
)

// onFakeCluster makes the commands read objs through a fake client, namespace ml.
func onFakeCluster(t *testing.T, objs ...client.Object) {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(objs...).Build()
	old := clusterClient
	clusterClient = func(_, ns string) (client.Client, string, error) {
		if ns == "" {
			ns = "ml"
		}
		return c, ns, nil
	}
	t.Cleanup(func() { clusterClient = old })
}

// TestCommandsOnFakeCluster runs report, explain, status and plan end to end on a
// cluster where the recommender has written a full recommendation, one without compute
// samples, one not yet, and has not planned its sharing policy: what is not known is
// "-" or null, never 0, through every command's whole path (list, summarise, write).
func TestCommandsOnFakeCluster(t *testing.T) {
	full := rec("full", 2, "20Gi", "300m", gpufracv1.SharingModeTimeSlicing, true)
	full.Namespace = "ml"
	full.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
		ConfidencePercent: 80, HistoryHours: 30, ObservedPeakMemory: qp("16Gi"), Target: gpufracv1.GPUResources{Memory: qp("20Gi"), Compute: qp("300m")}}}
	nocpu := rec("nocpu", 1, "20Gi", "0", gpufracv1.SharingModeTimeSlicing, true)
	nocpu.Namespace, nocpu.Status.Compute = "ml", nil
	nocpu.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing,
		ConfidencePercent: 80, HistoryHours: 30, ObservedPeakMemory: qp("16Gi"), Target: gpufracv1.GPUResources{Memory: qp("20Gi")}}}
	none := gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "new"}}
	none.Status.MatchedPods = 1
	var objs []client.Object
	for _, r := range []*gpufracv1.GPUFractionRecommendation{&full, &nocpu, &none} {
		objs = append(objs, r)
		gfa := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: r.Name}}
		gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name = "Deployment", r.Name
		objs = append(objs, gfa)
	}
	objs = append(objs, &gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool"}})
	onFakeCluster(t, objs...)

	out, _, err := run(t, "report", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Workloads []map[string]any `json:"workloads"`
		Totals    map[string]any   `json:"totals"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Workloads) != 3 {
		t.Fatalf("%d workloads: %s", len(rep.Workloads), out)
	}
	byName := map[string]map[string]any{}
	for _, w := range rep.Workloads {
		byName[w["name"].(string)] = w
	}
	for name, nulls := range map[string][]string{
		"full":  nil,
		"nocpu": {"computeMilli"},
		"new":   {"observedPeakBytes", "memoryBytes", "memoryRequestBytes", "computeMilli", "confidencePercent"},
	} {
		for _, k := range []string{"observedPeakBytes", "memoryBytes", "memoryRequestBytes", "computeMilli", "confidencePercent"} {
			v, ok := byName[name][k]
			wantNull := strings.Contains(strings.Join(nulls, ","), k)
			if !ok || (v == nil) != wantNull {
				t.Errorf("%s: %s = %v (present %v), want null: %v", name, k, v, ok, wantNull)
			}
		}
	}
	if rep.Totals["gpusToday"] != 4.0 || rep.Totals["gpusNeeded"] != 2.0 {
		t.Errorf("totals %v, want 4 today, 2 needed (full's two pods and nocpu on one GPU, new on its own)", rep.Totals)
	}
	text, _, err := run(t, "report")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "report", text, "no recommendation yet", "4 today at one per pod → 2 packed")
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 6 && f[1] == "nocpu" && f[6] != "-" {
			t.Errorf("nocpu's compute %q, want -:\n%s", f[6], text)
		}
	}

	expl, _, err := run(t, "explain", "new")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "explain new", expl, "No recommendation yet.")
	expl, _, err = run(t, "explain", "nocpu")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "explain nocpu", expl, "compute no target: no compute samples yet")

	st, _, err := run(t, "status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(st, "\n") {
		if f := strings.Fields(l); len(f) > 6 && f[1] == "new" && f[6] != "-/-" { // PODS is "0 applied"
			t.Errorf("status of new: recommended %q, want -/-:\n%s", f[6], st)
		}
	}

	plan, _, err := run(t, "plan")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "plan", plan, "no status yet")
	if strings.Contains(strings.Split(plan, "\n")[1], " 0 ") {
		t.Errorf("plan of an unplanned policy shows 0:\n%s", plan)
	}
}

// TestAutoscalerWithoutRecommendation: an autoscaler the recommender has written no
// GPUFractionRecommendation for (not running yet, or not watching its namespace) is
// named by report, in text and JSON, as not counted; before, it was left out and an
// autoscaled cluster read "0 workloads, no pods". explain says the same instead of
// failing with the API's not-found error.
func TestAutoscalerWithoutRecommendation(t *testing.T) {
	full := rec("full", 2, "20Gi", "300m", gpufracv1.SharingModeTimeSlicing, true)
	full.Namespace = "ml"
	var objs []client.Object
	for _, name := range []string{"web", "full"} {
		gfa := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
		gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name = "Deployment", name
		objs = append(objs, gfa)
	}
	onFakeCluster(t, append(objs, &full)...)
	text, _, err := run(t, "report")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "report", text, "1 autoscalers without a GPUFractionRecommendation yet (ml/web)", "their pods are not counted", "2 today at one per pod")
	out, _, err := run(t, "report", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Totals struct {
			WithoutRecommendation []string `json:"withoutRecommendation"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Totals.WithoutRecommendation) != 1 || rep.Totals.WithoutRecommendation[0] != "ml/web" {
		t.Errorf("totals.withoutRecommendation %v, want [ml/web]", rep.Totals.WithoutRecommendation)
	}

	expl, _, err := run(t, "explain", "web")
	if err != nil {
		t.Fatalf("explain of an autoscaler without a recommendation: %v", err)
	}
	wantContains(t, "explain web", expl, "ml/web targets Deployment web", "No recommendation yet: the recommender has written no GPUFractionRecommendation ml/web")
	if strings.Contains(expl, "0 pods") {
		t.Errorf("explain web says 0 pods where they are not known:\n%s", expl)
	}

	// No autoscaler at all: nothing is missing, and the JSON lists are empty, not null.
	onFakeCluster(t)
	out, _, err = run(t, "report", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "report -o json, empty cluster", out, `"workloads": []`, `"withoutRecommendation": []`)
}
