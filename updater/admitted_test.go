package updater

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// admit writes 3000Mi and 300m into container "main" of a one-GPU pod with the
// webhook's own backend and records what it wrote, as the webhook does.
func admitPod(t *testing.T, bt gpufracv1.BackendType, cfg backend.Config) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: limits("nvidia.com/gpu", "1")}}}}}
	tgt := &backend.Target{Container: "main", HasMemory: true, MemoryBytes: 3000 << 20, WrittenComputeMilli: -1}
	if bt != gpufracv1.BackendKAI && bt != gpufracv1.BackendKAINVFractions {
		tgt.HasCompute, tgt.ComputeMilli = true, 300
	}
	if _, err := backend.New(cfg)[bt].Apply(pod, []*backend.Target{tgt}); err != nil {
		t.Fatal(err)
	}
	ac := gpufracv1.AppliedContainer{Name: "main", WrittenMemory: resource.NewQuantity(tgt.WrittenMemoryBytes, resource.BinarySI)}
	if tgt.WrittenComputeMilli >= 0 {
		ac.WrittenCompute = resource.NewMilliQuantity(tgt.WrittenComputeMilli, resource.DecimalSI)
	}
	b, _ := json.Marshal(gpufracv1.AppliedRecord{Backend: bt, Containers: []gpufracv1.AppliedContainer{ac}})
	pod.Annotations[gpufracv1.AnnotationApplied] = string(b)
	return pod
}

// TestAdmittedMismatches: what each backend wrote reads back as written (no mismatch,
// also the KAI gpu-fraction, a share of usable memory); a value rewritten after
// admission, or removed, is a mismatch with both values (issue 14 kind 15).
func TestAdmittedMismatches(t *testing.T) {
	cfg := backend.Config{GPUMemoryBytes: 16 << 30}.WithDefaults()
	kaiFraction := cfg
	kaiFraction.KAI.Mode = backend.KAIModeFraction
	kaiFraction.KAI.ReservedMemoryBytes = 1 << 30
	for _, tc := range []struct {
		name    string
		backend gpufracv1.BackendType
		cfg     backend.Config
		rewrite func(*corev1.Pod)
		want    string // Mismatch.String() of the only mismatch; "" none
	}{
		{"hami as written", gpufracv1.BackendHAMi, cfg, nil, ""},
		{"hami gpumem rewritten by an extender", gpufracv1.BackendHAMi, cfg, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"] = resource.MustParse("4096")
		}, "main: memory written 3000Mi, carried 4Gi"},
		{"hami gpucores rewritten", gpufracv1.BackendHAMi, cfg, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits["nvidia.com/gpucores"] = resource.MustParse("50")
		}, "main: compute written 300m, carried 500m"},
		{"mps as written", gpufracv1.BackendMPS, cfg, nil, ""},
		{"mps memory limit rewritten", gpufracv1.BackendMPS, cfg, func(p *corev1.Pod) {
			p.Spec.Containers[0].Env[1].Value = "0=2000M"
		}, "main: memory written 3000Mi, carried 2000Mi"},
		{"annotations as written", gpufracv1.BackendAnnotations, cfg, nil, ""},
		{"annotation overridden by a user", gpufracv1.BackendAnnotations, cfg, func(p *corev1.Pod) {
			p.Annotations["gpufrac.io/container.main.gpu-memory"] = "8Gi"
		}, "main: memory written 3000Mi, carried 8Gi"},
		{"annotation removed", gpufracv1.BackendAnnotations, cfg, func(p *corev1.Pod) {
			delete(p.Annotations, "gpufrac.io/container.main.gpu-compute")
		}, "main: compute written 300m, carried gone"},
		{"kai gpu-memory as written", gpufracv1.BackendKAI, cfg, nil, ""},
		{"kai gpu-memory overridden", gpufracv1.BackendKAI, cfg, func(p *corev1.Pod) {
			p.Annotations["gpu-memory"] = "6000"
		}, "main: memory written 3000Mi, carried 6000Mi"},
		{"kai gpu-fraction as written (float read-back)", gpufracv1.BackendKAI, kaiFraction, nil, ""},
		{"kai gpu-fraction overridden", gpufracv1.BackendKAI, kaiFraction, func(p *corev1.Pod) {
			p.Annotations["gpu-fraction"] = "0.5"
		}, "main: memory written 3Gi, carried 7680Mi"},
		{"nvfractions as written", gpufracv1.BackendKAINVFractions, cfg, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := admitPod(t, tc.backend, tc.cfg)
			if tc.rewrite != nil {
				tc.rewrite(pod)
			}
			got := AdmittedMismatches(pod, tc.cfg)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("mismatches %v for a pod carrying what was written (%v)", got, pod.Annotations)
			case tc.want != "" && (len(got) != 1 || got[0].String() != tc.want):
				t.Errorf("mismatches %v, want [%s]", got, tc.want)
			}
		})
	}
	// No record, or a record that does not say what was written: nothing to compare.
	if got := AdmittedMismatches(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}, cfg); got != nil {
		t.Errorf("pod without a record: %v", got)
	}
}

// TestFractionMismatchReported: a pod whose gpumem an extender rewrote (record 1Gi,
// carried 2Gi) is not evicted; FractionMismatch True names it, one Warning event however
// many cycles, the gauge counts it; once it carries what was written the condition turns
// False (issue 14 kind 15).
func TestFractionMismatchReported(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
	for _, p := range f.pods {
		rec := gpufracv1.AppliedRecord{Backend: gpufracv1.BackendHAMi, Autoscaler: "web", Containers: []gpufracv1.AppliedContainer{{Name: "main",
			Memory: q("1Gi"), Compute: q("250m"),
			WrittenMemory: q("1Gi"), WrittenCompute: q("250m")}}}
		b, _ := json.Marshal(rec)
		p.Annotations[gpufracv1.AnnotationApplied] = string(b)
		p.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"] = resource.MustParse("1024")
		p.Spec.Containers[0].Resources.Limits["nvidia.com/gpucores"] = resource.MustParse("25")
	}
	f.pods[1].Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"] = resource.MustParse("2048")
	f.build()
	for range 3 {
		f.run()
	}
	if live := f.livePods(); len(live) != 3 {
		t.Fatalf("pods %v: a mismatch evicted a pod", live)
	}
	st := f.status()
	c := meta.FindStatusCondition(st.Conditions, ConditionFractionMismatch)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonBackendFieldsDiffer ||
		!strings.Contains(c.Message, "pod web-abc-1 (main: memory written 1Gi, carried 2Gi)") || strings.Contains(c.Message, "web-abc-0") {
		t.Fatalf("condition %+v", c)
	}
	if st.PodsOutOfDate != 0 || st.BlockedReason != "" {
		t.Errorf("status %+v: the mismatch made pods out of date", st)
	}
	if n := testutil.ToFloat64(podsMismatched); n != 1 {
		t.Errorf("gpufrac_updater_pods_fraction_mismatch = %v, want 1", n)
	}
	n := countEvents(f.events(), EventFractionMismatch)
	if n != 1 {
		t.Errorf("%d %s events over three cycles, want 1", n, EventFractionMismatch)
	}
	// Back to what was written: False, reason FractionsMatch.
	pod := &corev1.Pod{}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(f.pods[1]), pod); err != nil {
		t.Fatal(err)
	}
	pod.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"] = resource.MustParse("1024")
	if err := f.c.Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	f.run()
	if c := meta.FindStatusCondition(f.status().Conditions, ConditionFractionMismatch); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonFractionsMatch {
		t.Errorf("condition after the fix %+v", c)
	}
}

// TestInvalidAppliedRecordNeverShrinks: a pod whose gpufrac.io/applied annotation does
// not parse (truncated JSON) and that carries no backend fields would read as a whole
// GPU (80Gi against a 1Gi target): it is not evicted for a shrink. Its update is held
// with skip reason record-invalid, one Warning event names the pod and the parse error
// however many cycles, and gpufrac_updater_pods_record_invalid counts it; once the
// annotation is fixed the gauge is 0. The pods with valid records are left alone
// (they match the target).
func TestInvalidAppliedRecordNeverShrinks(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
	valid := f.pods[1].Annotations[gpufracv1.AnnotationApplied]
	f.pods[1].Annotations[gpufracv1.AnnotationApplied] = valid[:len(valid)/2]
	f.build()
	for range 3 {
		f.run()
	}
	if live := f.livePods(); !live["web-abc-1"] {
		t.Fatalf("pods %v: the pod with an invalid applied record was evicted", live)
	}
	st := f.status()
	held := false
	for _, u := range st.Updates {
		if u.Pod == "web-abc-1" && u.SkipReason == SkipRecordInvalid {
			held = true
		}
	}
	if !held {
		t.Errorf("updates %+v: want web-abc-1 held with %s", st.Updates, SkipRecordInvalid)
	}
	if n := testutil.ToFloat64(podsRecordInvalid); n != 1 {
		t.Errorf("gpufrac_updater_pods_record_invalid = %v, want 1", n)
	}
	evs := f.events()
	if n := countEvents(evs, EventAppliedRecordInvalid); n != 1 {
		t.Errorf("%d %s events over three cycles, want 1: %q", n, EventAppliedRecordInvalid, evs)
	}
	for _, e := range evs {
		if strings.Contains(e, EventAppliedRecordInvalid) && (!strings.HasPrefix(e, corev1.EventTypeWarning) || !strings.Contains(e, "web-abc-1") || !strings.Contains(e, "unexpected end of JSON input")) {
			t.Errorf("event %q: want a Warning naming the pod and the parse error", e)
		}
	}
	// The annotation fixed: nothing invalid.
	pod := &corev1.Pod{}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(f.pods[1]), pod); err != nil {
		t.Fatal(err)
	}
	pod.Annotations[gpufracv1.AnnotationApplied] = valid
	if err := f.c.Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	f.run()
	if n := testutil.ToFloat64(podsRecordInvalid); n != 0 {
		t.Errorf("after the fix gpufrac_updater_pods_record_invalid = %v, want 0", n)
	}
}
