package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// A time-sliced pod has memory applied and compute not partitioned: status shows its
// compute as "-", never as 0, and sums what was applied over containers.
func TestStatusAppliedComputeNotWritten(t *testing.T) {
	pod := func(name string, cs ...gpufracv1.AppliedContainer) corev1.Pod {
		rec, err := json.Marshal(gpufracv1.AppliedRecord{Autoscaler: "web", Containers: cs})
		if err != nil {
			t.Fatal(err)
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Annotations: map[string]string{gpufracv1.AnnotationApplied: string(rec)}}}
	}
	gfa := gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"time-sliced", pod("a", gpufracv1.AppliedContainer{Name: "c", Memory: qp("20Gi")}), "20Gi/-"},
		{"partitioned", pod("b", gpufracv1.AppliedContainer{Name: "c", Memory: qp("10Gi"), Compute: qp("250m")},
			gpufracv1.AppliedContainer{Name: "d", Memory: qp("10Gi"), Compute: qp("250m")}), "20Gi/500m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := writeStatus(&out, []gpufracv1.GPUFractionAutoscaler{gfa}, nil, []corev1.Pod{tc.pod}, metav1.Now().Time); err != nil {
				t.Fatal(err)
			}
			row := strings.Fields(strings.Split(out.String(), "\n")[1])
			if len(row) < 6 || row[5] != tc.want {
				t.Fatalf("APPLIED column: got row %q, want %q", row, tc.want)
			}
		})
	}
}

// status shows the pod's memory limit and compute request from the recommendation as
// the webhook reads it: summed over containers, the limit only where a container has a
// memoryLimit (another container's target counts in it), the request only of
// containers whose policy controls compute, and "-" where there is none or no
// recommendation.
func TestStatusLimitRequest(t *testing.T) {
	gfa := func(name string, policies ...gpufracv1.ContainerPolicy) gpufracv1.GPUFractionAutoscaler {
		g := gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		if len(policies) > 0 {
			g.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: policies}
		}
		return g
	}
	gfr := func(name string, cs ...gpufracv1.ContainerRecommendation) gpufracv1.GPUFractionRecommendation {
		r := gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		r.Status.ContainerRecommendations = cs
		return r
	}
	sliced := func(name, mem, limit, request string) gpufracv1.ContainerRecommendation {
		c := gpufracv1.ContainerRecommendation{ContainerName: name, SharingMode: gpufracv1.SharingModeTimeSlicing,
			Target: gpufracv1.GPUResources{Memory: qp(mem), Compute: qp("300m")}}
		if limit != "" {
			c.MemoryLimit = qp(limit)
		}
		if request != "" {
			c.ComputeRequest = qp(request)
		}
		return c
	}
	mps := sliced("main", "10Gi", "", "")
	mps.SharingMode = gpufracv1.SharingModeMPS
	gfas := []gpufracv1.GPUFractionAutoscaler{
		gfa("burst"), gfa("memonly", gpufracv1.ContainerPolicy{ContainerName: "side", ControlledResources: []gpufracv1.GPUResourceName{gpufracv1.ResourceMemory}}),
		gfa("mps"), gfa("new"),
	}
	gfrs := []gpufracv1.GPUFractionRecommendation{
		gfr("burst", sliced("main", "20Gi", "30Gi", "120m"), sliced("side", "4Gi", "", "30m")),
		gfr("memonly", sliced("main", "20Gi", "", "120m"), sliced("side", "4Gi", "", "30m")),
		gfr("mps", mps),
	}
	var out bytes.Buffer
	if err := writeStatus(&out, gfas, gfrs, nil, metav1.Now().Time); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	col := strings.Index(lines[0], "MEM LIMIT/COMPUTE REQUEST")
	if col < 0 {
		t.Fatalf("no MEM LIMIT/COMPUTE REQUEST column:\n%s", out.String())
	}
	for i, want := range []string{"34Gi/150m", "-/120m", "-/-", "-/-"} {
		if got := strings.Fields(lines[i+1][col:])[0]; got != want {
			t.Errorf("%s: limit/request %q, want %q:\n%s", gfas[i].Name, got, want, out.String())
		}
	}
}

// A pod whose applied record does not parse is named on the warning output with the
// parse error, not silently counted as not applied; a valid record gives no warning.
func TestStatusWarnsInvalidRecord(t *testing.T) {
	pod := func(name, record string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{gpufracv1.AnnotationApplied: record}}}
	}
	var out bytes.Buffer
	warnInvalidRecords(&out, []corev1.Pod{pod("good", `{"autoscaler":"web"}`), pod("bad", `{"autoscaler":"web",`)})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "pod ns/bad") || !strings.Contains(lines[0], gpufracv1.AnnotationApplied) || !strings.Contains(lines[0], "unexpected end of JSON input") {
		t.Errorf("warnings %q: want one line naming ns/bad, the annotation and the parse error", out.String())
	}
}

// An autoscaler whose spec changed (generation 3: new bounds or policies) after the
// recommender's last status (generation 2), with the recommender down or older: its
// recommended values are the old spec's, and status says so rather than show them as
// the spec's.
func TestStatusRecommendationOfAnOlderSpec(t *testing.T) {
	g := gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 3}}
	g.Status.ObservedGeneration, g.Status.Memory = 2, qp("20Gi")
	current := *g.DeepCopy()
	current.Name, current.Status.ObservedGeneration = "current", 3
	var out bytes.Buffer
	if err := writeStatus(&out, []gpufracv1.GPUFractionAutoscaler{g, current}, nil, nil, metav1.Now().Time); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[1], "20Gi/- (for spec generation 2, now 3: not yet recomputed)") {
		t.Errorf("an older spec's recommendation is not said to be one:\n%s", out.String())
	}
	if strings.Contains(lines[2], "generation") {
		t.Errorf("a current recommendation is said to be an older spec's:\n%s", out.String())
	}
}

// Pods that ended (Failed: evicted under node pressure and kept until garbage
// collection; Succeeded: a Job's completed pod) hold no GPU and are not among the pods
// the updater counts (status.updater.pods): status counts neither their records as
// applied nor shows their values, whatever their phase and wherever they are in the
// list; before, 2 running pods and 3 evicted ones read "5/2 applied" with an evicted
// pod's 40Gi.
func TestStatusEndedPodsAreNotApplied(t *testing.T) {
	pod := func(name, mem string, phase corev1.PodPhase) corev1.Pod {
		rec, err := json.Marshal(gpufracv1.AppliedRecord{Autoscaler: "web", Containers: []gpufracv1.AppliedContainer{{Name: "c", Memory: qp(mem)}}})
		if err != nil {
			t.Fatal(err)
		}
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{gpufracv1.AnnotationApplied: string(rec)}}}
		p.Status.Phase = phase
		return p
	}
	gfa := gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	gfa.Status.Updater = &gpufracv1.UpdaterStatus{Pods: 2}
	for _, ended := range []corev1.PodPhase{corev1.PodFailed, corev1.PodSucceeded} {
		for _, endedFirst := range []bool{false, true} {
			live := []corev1.Pod{pod("a", "20Gi", corev1.PodRunning), pod("b", "20Gi", corev1.PodPending)}
			old := []corev1.Pod{pod("x", "40Gi", ended), pod("y", "40Gi", ended), pod("z", "40Gi", ended)}
			pods := append(live, old...)
			if endedFirst {
				pods = append(old, live...)
			}
			var out, warn bytes.Buffer
			if err := writeStatus(&out, []gpufracv1.GPUFractionAutoscaler{gfa}, nil, pods, metav1.Now().Time); err != nil {
				t.Fatal(err)
			}
			row := strings.Fields(strings.Split(out.String(), "\n")[1])
			if len(row) < 6 || row[3] != "2/2" || row[5] != "20Gi/-" {
				t.Errorf("%s pods, listed first %v: row %q, want 2/2 applied, 20Gi/-:\n%s", ended, endedFirst, row, out.String())
			}
			bad := pod("w", "1Gi", ended)
			bad.Annotations[gpufracv1.AnnotationApplied] = `{"autoscaler":"web",`
			warnInvalidRecords(&warn, append(pods, bad))
			if warn.Len() != 0 {
				t.Errorf("%s pod's invalid record warned about: %s", ended, warn.String())
			}
		}
	}
}

// status of a namespace with many autoscalers reads each pod once: its work grows with
// autoscalers plus pods, not with their product. Before, every autoscaler parsed the
// applied record of every pod of its namespace, and 2,000 autoscalers of 5 pods each
// took over a minute. Counted in allocations (no wall time): doubling the namespace
// doubles them, where the product quadrupled them.
func TestStatusLinearInAutoscalersAndPods(t *testing.T) {
	namespace := func(n int) ([]gpufracv1.GPUFractionAutoscaler, []corev1.Pod) {
		var gfas []gpufracv1.GPUFractionAutoscaler
		var pods []corev1.Pod
		for i := range n {
			name := fmt.Sprintf("w%04d", i)
			gfas = append(gfas, gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}})
			rec, err := json.Marshal(gpufracv1.AppliedRecord{Autoscaler: name, Containers: []gpufracv1.AppliedContainer{{Name: "c", Memory: qp("20Gi")}}})
			if err != nil {
				t.Fatal(err)
			}
			for j := range 5 {
				pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: fmt.Sprintf("%s-%d", name, j),
					Annotations: map[string]string{gpufracv1.AnnotationApplied: string(rec)}}})
			}
		}
		return gfas, pods
	}
	now := metav1.Now().Time
	allocs := func(n int) float64 {
		gfas, pods := namespace(n)
		var out bytes.Buffer
		if err := writeStatus(&out, gfas, nil, pods, now); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(out.String(), " 5 applied "); got != n {
			t.Fatalf("%d autoscalers: %d rows of 5 applied pods, want %d", n, got, n)
		}
		return testing.AllocsPerRun(2, func() { _ = writeStatus(io.Discard, gfas, nil, pods, now) })
	}
	prev := allocs(20)
	for _, n := range []int{40, 80, 160} {
		cur := allocs(n)
		if r := cur / prev; r > 2.5 {
			t.Errorf("%d → %d autoscalers (5 pods each): allocations ×%.1f (%.0f → %.0f), want about ×2", n/2, n, r, prev, cur)
		}
		prev = cur
	}
}
