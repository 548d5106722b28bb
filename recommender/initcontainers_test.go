package recommender

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// withInitAndSidecar gives every pod of objs, created at created, an init container
// "warmup" that ran 5 minutes from its creation and finished, a native sidecar
// "tokenizer" and the regular container "main".
func withInitAndSidecar(objs []client.Object, created time.Time) []client.Object {
	for _, p := range podsOf(objs) {
		p.CreationTimestamp = metav1.NewTime(created)
		p.Spec.InitContainers = []corev1.Container{
			gpuRequest("warmup"),
			func() corev1.Container {
				c := gpuRequest("tokenizer")
				c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
				return c
			}(),
		}
		p.Spec.Containers = []corev1.Container{gpuRequest("main")}
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{
			{Name: "warmup", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				StartedAt: metav1.NewTime(created), FinishedAt: metav1.NewTime(created.Add(5 * time.Minute))}}},
			{Name: "tokenizer", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(created)}}},
		}
	}
	return objs
}

// addContainerDCGM writes n samples every 30 s from start for one container of p:
// FB_USED in MiB and SM_ACTIVE as a ratio.
func addContainerDCGM(t testing.TB, prom *promtest.Server, p *corev1.Pod, container string, start time.Time, n int, fbMiB, smActive float64) {
	for metric, v := range map[string]float64{metrics.DCGMFBUsed: fbMiB, metrics.DCGMSMActive: smActive} {
		l := dcgmLabels(metric, p, "GPU-"+p.Name)
		l["container"] = container
		prom.Add(t, l, start, 30*time.Second, promtest.Repeat(v, n)...)
	}
}

// Kind 4 (issue 14): a pod with a GPU init container that ran 5 minutes, a GPU native
// sidecar and a GPU regular container, all with 2 days of pod history. The init
// container's few minutes neither lower the pod's confidence (LowConfidence False, the
// webhook's 50 % minimum met) nor add to its totals: memory and compute are
// max(init, sidecar + regular). With an init container larger than the other two
// together, it is the pod's need; smaller, it adds nothing. Each recommendation says
// where its container sits.
func TestInitContainersNeitherLowerConfidenceNorAddUp(t *testing.T) {
	created := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	objs := append(withInitAndSidecar(deployment("ml", "big-init", 1), created), withInitAndSidecar(deployment("ml", "small-init", 1), created)...)
	objs = append(objs, gfa("ml", "big-init", "big-init"), gfa("ml", "small-init", "small-init"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	running := int(h.now.Sub(created.Add(6*time.Minute))/(30*time.Second)) + 1
	for i, initMiB := range []float64{30000, 2000} {
		addContainerDCGM(t, h.prom, pods[i], "warmup", created.Add(30*time.Second), 9, initMiB, 0.9)
		addContainerDCGM(t, h.prom, pods[i], "tokenizer", created.Add(6*time.Minute), running, 4000, 0.1)
		addContainerDCGM(t, h.prom, pods[i], "main", created.Add(6*time.Minute), running, 12000, 0.5)
	}
	h.runCycles(t, 1, nil)

	for _, name := range []string{"big-init", "small-init"} {
		st := h.gfr(t, "ml", name).Status
		byName := map[string]gpufracv1.ContainerRecommendation{}
		for _, c := range st.ContainerRecommendations {
			byName[c.ContainerName] = c
		}
		warmup, tok, main := byName["warmup"], byName["tokenizer"], byName["main"]
		if warmup.Target.Memory == nil || tok.Target.Memory == nil || main.Target.Memory == nil {
			t.Fatalf("%s: want recommendations for warmup, tokenizer and main: %+v (%+v)", name, st.ContainerRecommendations, st.Conditions)
		}
		for c, want := range map[string]gpufracv1.ContainerType{"warmup": gpufracv1.ContainerTypeInit, "tokenizer": gpufracv1.ContainerTypeSidecar, "main": gpufracv1.ContainerTypeRegular} {
			if got := byName[c].ContainerType; got != want {
				t.Errorf("%s: container %s type %q, want %q", name, c, got, want)
			}
		}
		if warmup.ConfidencePercent >= 10 {
			t.Fatalf("%s: the init container's 5 minutes gave confidence %d%%; the test needs it low", name, warmup.ConfidencePercent)
		}
		wantConf := min(tok.ConfidencePercent, main.ConfidencePercent)
		if st.ConfidencePercent == nil || *st.ConfidencePercent != wantConf || wantConf < 50 {
			t.Errorf("%s: pod confidence %v, want the sidecar's and regular container's %d%% (≥ 50), not the init container's %d%%", name, ptr.Deref(st.ConfidencePercent, -1), wantConf, warmup.ConfidencePercent)
		}
		if c := condition(st, gpufracv1.ConditionLowConfidence); !isFalse(c) {
			t.Errorf("%s: LowConfidence %+v, want False", name, c)
		}
		if c := condition(st, gpufracv1.ConditionRecommendationProvided); !isTrue(c) {
			t.Errorf("%s: RecommendationProvided %+v, want True", name, c)
		}
		running := tok.Target.Memory.Value() + main.Target.Memory.Value()
		wantMem := max(warmup.Target.Memory.Value(), running)
		if st.Memory == nil || st.Memory.Value() != wantMem {
			t.Errorf("%s: pod memory %v, want max(init %v, sidecar+regular %v) = %d", name, st.Memory, warmup.Target.Memory, resource.NewQuantity(running, resource.BinarySI), wantMem)
		}
		wantCPU := max(warmup.Target.Compute.MilliValue(), tok.Target.Compute.MilliValue()+main.Target.Compute.MilliValue())
		if st.Compute == nil || st.Compute.MilliValue() != wantCPU {
			t.Errorf("%s: pod compute %v, want %dm", name, st.Compute, wantCPU)
		}
		// The autoscaler's printer columns show the same totals.
		var a gpufracv1.GPUFractionAutoscaler
		if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: "ml", Name: name}, &a); err != nil {
			t.Fatal(err)
		}
		if a.Status.Memory == nil || a.Status.Memory.Cmp(*st.Memory) != 0 || ptr.Deref(a.Status.ConfidencePercent, -1) != wantConf {
			t.Errorf("%s: autoscaler status memory %v confidence %v, want %v and %d", name, a.Status.Memory, a.Status.ConfidencePercent, st.Memory, wantConf)
		}
	}
	big := h.gfr(t, "ml", "big-init").Status
	if w := big.ContainerRecommendations[2]; w.ContainerName != "warmup" || big.Memory.Cmp(*w.Target.Memory) != 0 {
		t.Errorf("big-init: the 30000 MiB init container is the pod's need: pod %v, init %v", big.Memory, w.Target.Memory)
	}
	// Without a live pod the types written last time hold.
	if err := h.c.Delete(t.Context(), pods[0]); err != nil {
		t.Fatal(err)
	}
	h.runCycles(t, 1, nil)
	for _, c := range h.gfr(t, "ml", "big-init").Status.ContainerRecommendations {
		if c.ContainerName == "warmup" && c.ContainerType != gpufracv1.ContainerTypeInit {
			t.Errorf("without pods: warmup became %q", c.ContainerType)
		}
	}
	small := h.gfr(t, "ml", "small-init").Status
	if small.Memory.Value() < 16000*metrics.MiB || small.Memory.Value() >= 18000*metrics.MiB*1.15 {
		t.Errorf("small-init: pod memory %v, want sidecar + regular (16000 MiB plus headroom), without the 2000 MiB init container", small.Memory)
	}
}

// summarise adds up in start order: an init container after a GPU sidecar runs next to
// it, one before it does not; a container the pod spec lacks comes last.
func TestSummariseStartOrder(t *testing.T) {
	rec := func(name string, typ gpufracv1.ContainerType, mib int64, conf int32) gpufracv1.ContainerRecommendation {
		return gpufracv1.ContainerRecommendation{ContainerName: name, ContainerType: typ, ConfidencePercent: conf,
			Target: gpufracv1.GPUResources{Memory: resource.NewQuantity(mib*metrics.MiB, resource.BinarySI)}}
	}
	recs := []gpufracv1.ContainerRecommendation{
		rec("a-init", gpufracv1.ContainerTypeInit, 3500, 1),
		rec("b-sidecar", gpufracv1.ContainerTypeSidecar, 2000, 90),
		rec("c-main", gpufracv1.ContainerTypeRegular, 1000, 80),
	}
	for _, tc := range []struct {
		name  string
		start map[string]int
		want  int64
	}{
		{"init after the sidecar", map[string]int{"b-sidecar": 0, "a-init": 1, "c-main": 2}, 5500},
		{"init before the sidecar", map[string]int{"a-init": 0, "b-sidecar": 1, "c-main": 2}, 3500},
		{"no spec: the init container counts next to every sidecar", nil, 5500},
	} {
		st := &gpufracv1.GPUFractionRecommendationStatus{ContainerRecommendations: recs}
		summarise(st, tc.start)
		if st.Memory.Value() != tc.want*metrics.MiB {
			t.Errorf("%s: %v, want %d MiB", tc.name, st.Memory, tc.want)
		}
		if *st.ConfidencePercent != 80 {
			t.Errorf("%s: confidence %d, want 80 (the init container's 1 left out)", tc.name, *st.ConfidencePercent)
		}
	}
	st := &gpufracv1.GPUFractionRecommendationStatus{ContainerRecommendations: recs[:1]}
	summarise(st, nil)
	if *st.ConfidencePercent != 1 {
		t.Errorf("only an init container: confidence %d, want its 1", *st.ConfidencePercent)
	}
}
