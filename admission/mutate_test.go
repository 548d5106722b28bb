package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/sharingplan/plantest"
)

// mutator returns a Mutator over a fake cache holding the Deployment web, its
// ReplicaSet web-abc and objs.
func mutator(t testing.TB, cfg Config, objs ...client.Object) *Mutator {
	dep, rs := deploymentObjects()
	m := NewMutator(newFakeReader(t, append([]client.Object{dep, rs}, objs...)...), scheme.MustNew(), cfg)
	return m
}

func handle(t *testing.T, m *Mutator, pod *corev1.Pod) (outcome, admission.Response, *corev1.Pod) {
	t.Helper()
	req := createRequest(t, pod)
	o := m.decide(context.Background(), req, nil)
	resp := m.Handle(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("pod denied: %+v", resp.Result)
	}
	return o, resp, patched(t, req, resp)
}

func TestMutateHAMiThroughDeployment(t *testing.T) {
	gfa := autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi)
	gfa.Spec.Backend.MemoryOverhead = q("256Mi")
	gfr := recommendation("web", 80, containerRec("main", "4Gi", "350m"))
	m := mutator(t, Config{Config: backend.Config{MemoryOverhead: map[gpufracv1.BackendType]int64{gpufracv1.BackendHAMi: 256 * backend.MiB}}}, gfa, gfr)
	o, resp, got := handle(t, m, podOf(gpuContainer("main", 1)))
	if o.skip != "" {
		t.Fatalf("skipped: %s %v", o.skip, o.warnings)
	}
	if len(resp.Warnings) != 0 {
		t.Errorf("warnings %v", resp.Warnings)
	}
	c := &got.Spec.Containers[0]
	if v, _ := resourceValue(c, "limits", "nvidia.com/gpumem"); v != 4096+512 {
		t.Errorf("gpumem = %d, want 4608 (4Gi + 256Mi flag + 256Mi spec overhead)", v)
	}
	if v, _ := resourceValue(c, "limits", "nvidia.com/gpucores"); v != 35 {
		t.Errorf("gpucores = %d, want 35", v)
	}
	if got.Namespace != "" || got.GenerateName != "web-abc-" {
		t.Error("patch touched metadata it should not")
	}
	rec, err := gpufracv1.ParseApplied(got.Annotations)
	if err != nil || rec == nil {
		t.Fatalf("applied record: %v %v", rec, err)
	}
	if rec.Backend != gpufracv1.BackendHAMi || rec.Autoscaler != "web" || rec.RecommendationGeneration != 3 || rec.RecommendationResourceVersion == "" || rec.ConfidencePercent != 80 || rec.ObservedGeneration != 1 {
		t.Errorf("record %+v", rec)
	}
	ac := rec.Container("main")
	if ac == nil || ac.Memory.String() != "4Gi" || ac.Compute.String() != "350m" || ac.WrittenMemory.String() != "4608Mi" || ac.WrittenCompute.String() != "350m" {
		t.Errorf("record container %+v", ac)
	}

	// The same pod again (reinvocation) needs no change.
	req := createRequest(t, got)
	got.Namespace = ""
	if resp := m.Handle(context.Background(), req); len(resp.Patches) != 0 {
		t.Errorf("second pass patches %v, want none", resp.Patches)
	}
}

func TestMutateEachBackend(t *testing.T) {
	for _, tc := range []struct {
		backend gpufracv1.BackendType
		check   func(t *testing.T, p *corev1.Pod)
	}{
		{gpufracv1.BackendHAMi, func(t *testing.T, p *corev1.Pod) {
			if v, _ := resourceValue(&p.Spec.Containers[0], "limits", "nvidia.com/gpumem"); v != 2048 {
				t.Errorf("gpumem %d", v)
			}
		}},
		{gpufracv1.BackendKAI, func(t *testing.T, p *corev1.Pod) {
			if p.Annotations["gpu-memory"] != "2048" || p.Spec.SchedulerName != "kai-scheduler" {
				t.Errorf("annotations %v scheduler %s", p.Annotations, p.Spec.SchedulerName)
			}
			if _, ok := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; ok {
				t.Error("nvidia.com/gpu kept")
			}
		}},
		{gpufracv1.BackendKAINVFractions, func(t *testing.T, p *corev1.Pod) {
			if p.Annotations["nvidia.com/container.main.gpu-memory.request"] != "2Gi" {
				t.Errorf("annotations %v", p.Annotations)
			}
		}},
		{gpufracv1.BackendMPS, func(t *testing.T, p *corev1.Pod) {
			if v, _ := env(&p.Spec.Containers[0], "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); v != "0=2048M" {
				t.Errorf("env %v", p.Spec.Containers[0].Env)
			}
			if v, _ := env(&p.Spec.Containers[0], "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); v != "20" {
				t.Errorf("env %v", p.Spec.Containers[0].Env)
			}
		}},
		{gpufracv1.BackendAnnotations, func(t *testing.T, p *corev1.Pod) {
			if p.Annotations["gpufrac.io/gpu-memory"] != "2Gi" || p.Annotations["gpufrac.io/gpu-compute"] != "200m" {
				t.Errorf("annotations %v", p.Annotations)
			}
		}},
	} {
		t.Run(string(tc.backend), func(t *testing.T) {
			m := mutator(t, Config{}, autoscaler("web", gpufracv1.UpdateModeRecreate, tc.backend), recommendation("web", 60, containerRec("main", "2Gi", "200m")))
			o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("skipped %s %v", o.skip, o.warnings)
			}
			tc.check(t, got)
			if _, ok := got.Annotations[gpufracv1.AnnotationApplied]; !ok {
				t.Error("no applied record")
			}
		})
	}
}

func TestMutateSkips(t *testing.T) {
	base := func() []client.Object {
		return []client.Object{autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi), recommendation("web", 80, containerRec("main", "4Gi", "350m"))}
	}
	stale := recommendation("web", 80, containerRec("main", "4Gi", "350m"))
	stale.OwnerReferences[0].UID = "old-uid"
	// Orphaned (kubectl delete gfa web --cascade=orphan, then web created again): no
	// ownerReference to the autoscaler until the recommender adopts it.
	orphaned := recommendation("web", 80, containerRec("main", "4Gi", "350m"))
	orphaned.OwnerReferences = nil
	otherController := recommendation("web", 80, containerRec("main", "4Gi", "350m"))
	otherController.OwnerReferences[0].Kind = "ConfigMap"
	// The autoscaler was retargeted from Deployment api to web; the recommender has not
	// written since: api's fraction must not go into web's pods.
	retargeted := recommendation("web", 80, containerRec("main", "4Gi", "350m"))
	retargeted.Spec.TargetRef = autoscalingRef("Deployment", "api")
	// The pods were seen using more than one GPU of --gpu-memory (80Gi, the default):
	// the GPUs are larger than the flag says (or the samples are wrong), and the target,
	// capped at one GPU, is below the observed peak.
	peakAboveGPU := containerRec("main", "80Gi", "")
	peakAboveGPU.ObservedPeakMemory = q("100Gi")
	notProvided := recommendation("web", 80, containerRec("main", "4Gi", "350m"))
	notProvided.Status.Conditions[0].Status = metav1.ConditionFalse
	excluded := podOf(gpuContainer("main", 1))
	excluded.Annotations = map[string]string{gpufracv1.AnnotationExclude: "true"}
	orphan := podOf(gpuContainer("main", 1))
	orphan.OwnerReferences = nil
	wrongRS := podOf(gpuContainer("main", 1))
	wrongRS.OwnerReferences[0].Name = "not-cached"

	for _, tc := range []struct {
		name   string
		objs   []client.Object
		cfg    Config
		pod    *corev1.Pod
		reason string
		warn   bool
	}{
		{"off", []client.Object{autoscaler("web", gpufracv1.UpdateModeOff, gpufracv1.BackendHAMi), base()[1]}, Config{}, nil, SkipModeOff, false},
		{"no update policy", []client.Object{func() client.Object {
			a := autoscaler("web", "", gpufracv1.BackendHAMi)
			a.Spec.UpdatePolicy = nil
			return a
		}(), base()[1]}, Config{}, nil, SkipModeOff, false},
		{"no autoscaler", nil, Config{}, nil, SkipNoAutoscaler, false},
		{"no recommendation", base()[:1], Config{}, nil, SkipNoRecommendation, false},
		{"recommendation not provided", []client.Object{base()[0], notProvided}, Config{}, nil, SkipNoRecommendation, false},
		{"stale recommendation", []client.Object{base()[0], stale}, Config{}, nil, SkipStale, false},
		{"recommendation of the former target", []client.Object{base()[0], retargeted}, Config{}, nil, SkipStale, false},
		{"orphaned recommendation", []client.Object{base()[0], orphaned}, Config{}, nil, SkipStale, false},
		{"recommendation controlled by another kind", []client.Object{base()[0], otherController}, Config{}, nil, SkipStale, false},
		{"low confidence", []client.Object{base()[0], recommendation("web", 49, containerRec("main", "4Gi", "350m"))}, Config{}, nil, SkipLowConfidence, false},
		{"custom confidence", []client.Object{base()[0], recommendation("web", 89, containerRec("main", "4Gi", "350m"))}, Config{MinConfidence: ptr.To[int32](90)}, nil, SkipLowConfidence, false},
		{"no matching container", []client.Object{base()[0], recommendation("web", 80, containerRec("other", "4Gi", "350m"))}, Config{}, nil, SkipNoContainer, false},
		{"excluded", base(), Config{}, excluded, SkipExcluded, false},
		{"no GPU", base(), Config{}, podOf(corev1.Container{Name: "main"}), SkipNoGPU, false},
		{"bare pod", base(), Config{}, orphan, SkipNoController, false},
		{"owner not cached", base(), Config{OwnerWait: 20 * time.Millisecond}, wrongRS, SkipOwnerNotCached, true},
		{"compute out of range", []client.Object{base()[0], recommendation("web", 80, containerRec("main", "4Gi", "2"))}, Config{}, nil, backend.UnsafeInvalidValue, true},
		{"memory above one GPU", []client.Object{base()[0], recommendation("web", 80, containerRec("main", "100Gi", ""))}, Config{}, nil, backend.UnsafeRecommendationSize, true},
		{"negative memory", []client.Object{base()[0], recommendation("web", 80, containerRec("main", "-1Gi", ""))}, Config{}, nil, backend.UnsafeInvalidValue, true},
		{"negative compute", []client.Object{base()[0], recommendation("web", 80, containerRec("main", "4Gi", "-100m"))}, Config{}, nil, backend.UnsafeInvalidValue, true},
		// Rejected by the validating webhook; one created while it was down (the updater
		// replaces no pod of it either: updater TestNegativeOverheadEvictsNothing).
		{"negative memoryOverhead", []client.Object{func() client.Object {
			a := autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi)
			a.Spec.Backend.MemoryOverhead = q("-1Gi")
			return a
		}(), base()[1]}, Config{}, nil, backend.UnsafeInvalidValue, true},
		{"observed peak above one GPU", []client.Object{base()[0], recommendation("web", 80, peakAboveGPU)}, Config{}, nil, backend.UnsafeRecommendationSize, true},
		{"unsafe multi-gpu", base(), Config{}, podOf(gpuContainer("main", 2)), backend.UnsafeMultiGPU, true},
		{"nothing written", base(), Config{}, podOf(corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": *q("1")}}}), SkipNothingWritten, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod
			if pod == nil {
				pod = podOf(gpuContainer("main", 1))
			}
			m := mutator(t, tc.cfg, tc.objs...)
			rec := events.NewFakeRecorder(10)
			m.Events = rec
			o, resp, got := handle(t, m, pod)
			if o.skip != tc.reason {
				t.Fatalf("reason %q (%v), want %q", o.skip, o.warnings, tc.reason)
			}
			if len(resp.Patches) != 0 {
				t.Errorf("patches %v on a skipped pod", resp.Patches)
			}
			if (len(resp.Warnings) > 0) != tc.warn {
				t.Errorf("warnings %v, want some: %v", resp.Warnings, tc.warn)
			}
			if len(got.Annotations) != len(pod.Annotations) {
				t.Errorf("annotations changed: %v", got.Annotations)
			}
			if tc.warn && o.gfa != nil && len(rec.Events) == 0 {
				t.Error("no event recorded on the autoscaler")
			}
		})
	}
}

// Several autoscalers on one workload (the validating webhook was down): the oldest is
// in charge, whatever the names; ties go to the name that sorts first. Its
// recommendation is written, the others' never, and both get an event.
func TestMutateSeveralAutoscalersOldestWins(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name               string
		createdA, createdZ time.Time
		winner, loser      string
		winnerMem          int64
	}{
		{"older name sorts last", t0.Add(time.Minute), t0, "z-web", "a-web", 2048},
		{"older name sorts first", t0, t0.Add(time.Minute), "a-web", "z-web", 4096},
		{"same second: name", t0, t0, "a-web", "z-web", 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := autoscaler("a-web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
			a.CreationTimestamp = metav1.NewTime(tc.createdA)
			z := autoscaler("z-web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
			z.CreationTimestamp = metav1.NewTime(tc.createdZ)
			m := mutator(t, Config{}, a, z, recommendation("a-web", 80, containerRec("main", "4Gi", "")), recommendation("z-web", 80, containerRec("main", "2Gi", "")))
			rec := events.NewFakeRecorder(10)
			m.Events = rec
			o, resp, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("skipped %s %v", o.skip, o.warnings)
			}
			if v, _ := resourceValue(&got.Spec.Containers[0], "limits", "nvidia.com/gpumem"); v != tc.winnerMem {
				t.Errorf("gpumem %d backend.MiB, want %d (the recommendation of %s)", v, tc.winnerMem, tc.winner)
			}
			if r, _ := gpufracv1.ParseApplied(got.Annotations); r == nil || r.Autoscaler != tc.winner {
				t.Errorf("applied record %+v, want autoscaler %s", r, tc.winner)
			}
			if len(resp.Warnings) == 0 || !strings.Contains(resp.Warnings[0], tc.winner+" is in charge") {
				t.Errorf("warnings %v", resp.Warnings)
			}
			var evs []string
			for len(rec.Events) > 0 {
				evs = append(evs, <-rec.Events)
			}
			onWinner, onLoser := false, false
			for _, e := range evs {
				onWinner = onWinner || (strings.Contains(e, EventDuplicateTarget) && strings.Contains(e, "also target"))
				onLoser = onLoser || (strings.Contains(e, EventDuplicateTarget) && strings.Contains(e, "this one (created"))
			}
			if !onWinner || !onLoser {
				t.Errorf("events %v: want a %s event on the winner and on the loser", evs, EventDuplicateTarget)
			}
		})
	}
}

func TestMutatePolicies(t *testing.T) {
	gfa := autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi)
	off := gpufracv1.ContainerScalingModeOff
	gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{
		{ContainerName: "*", ControlledResources: []gpufracv1.GPUResourceName{gpufracv1.ResourceMemory}},
		{ContainerName: "frozen", Mode: &off},
	}}
	gfr := recommendation("web", 80, containerRec("a", "1Gi", "500m"), containerRec("frozen", "1Gi", "500m"), containerRec("b", "2Gi", "100m"))
	m := mutator(t, Config{}, gfa, gfr)
	o, _, got := handle(t, m, podOf(gpuContainer("a", 1), gpuContainer("frozen", 1), gpuContainer("b", 1)))
	if o.skip != "" {
		t.Fatal(o.skip, o.warnings)
	}
	for i, want := range []int64{1024, 0, 2048} {
		c := &got.Spec.Containers[i]
		v, _ := resourceValue(c, "limits", "nvidia.com/gpumem")
		if v != want {
			t.Errorf("%s gpumem %d, want %d", c.Name, v, want)
		}
		if _, ok := c.Resources.Limits["nvidia.com/gpucores"]; ok {
			t.Errorf("%s: compute written though only memory is controlled", c.Name)
		}
	}
	rec, _ := gpufracv1.ParseApplied(got.Annotations)
	if len(rec.Containers) != 2 || rec.Container("frozen") != nil || rec.Container("a").Compute != nil {
		t.Errorf("record %+v", rec)
	}
}

func TestMutateMemoryCappedToOneGPU(t *testing.T) {
	gfa := autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi)
	gfa.Spec.Backend.MemoryOverhead = q("2Gi")
	m := mutator(t, Config{Config: backend.Config{GPUMemoryBytes: 80 << 30}}, gfa, recommendation("web", 80, containerRec("main", "79Gi", "")))
	o, resp, got := handle(t, m, podOf(gpuContainer("main", 1)))
	if o.skip != "" {
		t.Fatal(o.skip)
	}
	if v, _ := resourceValue(&got.Spec.Containers[0], "limits", "nvidia.com/gpumem"); v != 80<<10 {
		t.Errorf("gpumem %d, want one GPU", v)
	}
	if len(resp.Warnings) != 1 {
		t.Errorf("warnings %v", resp.Warnings)
	}
}

func TestMutateJobPod(t *testing.T) {
	ctrl := true
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "train", UID: "job-uid"}}
	gfa := autoscaler("train", gpufracv1.UpdateModeInitial, gpufracv1.BackendAnnotations)
	gfa.Spec.TargetRef = autoscalingRef("Job", "train")
	gfa.Spec.TargetRef.APIVersion = "batch/v1"
	m := mutator(t, Config{}, job, gfa, recommendation("train", 80, containerRec("main", "1Gi", "")))
	pod := podOf(gpuContainer("main", 1))
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid", Controller: &ctrl}}
	o, _, got := handle(t, m, pod)
	if o.skip != "" {
		t.Fatal(o.skip)
	}
	if got.Annotations["gpufrac.io/gpu-memory"] != "1Gi" {
		t.Errorf("annotations %v", got.Annotations)
	}
}

func TestMutateNeverDenies(t *testing.T) {
	m := mutator(t, Config{})
	m.Reader = panicReader{}
	resp := m.Handle(context.Background(), createRequest(t, podOf(gpuContainer("main", 1))))
	if !resp.Allowed || len(resp.Warnings) == 0 {
		t.Fatalf("panic: allowed=%v warnings=%v", resp.Allowed, resp.Warnings)
	}
	m = mutator(t, Config{})
	m.Synced = func() bool { return false }
	if o := m.decide(context.Background(), createRequest(t, podOf(gpuContainer("main", 1))), nil); o.skip != SkipNotReady {
		t.Errorf("unsynced: %s", o.skip)
	}
	req := createRequest(t, podOf(gpuContainer("main", 1)))
	req.Object.Raw = []byte("{not json")
	if resp := m.Handle(context.Background(), req); !resp.Allowed {
		t.Error("undecodable pod denied")
	}
	req = createRequest(t, podOf(gpuContainer("main", 1)))
	req.Operation = "UPDATE"
	if o := m.decide(context.Background(), req, nil); o.skip != SkipNotPodCreate {
		t.Errorf("update: %s", o.skip)
	}
}

type panicReader struct{ client.Reader }

func (panicReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	panic("boom")
}

func TestMutateWarningsAreShort(t *testing.T) {
	// Admission warnings should stay on one line.
	m := mutator(t, Config{}, autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendKAI), recommendation("web", 80, containerRec("a", "1Gi", ""), containerRec("b", "1Gi", "")))
	_, resp, _ := handle(t, m, podOf(gpuContainer("a", 1), gpuContainer("b", 1)))
	for _, w := range resp.Warnings {
		if strings.Contains(w, "\n") {
			t.Errorf("multi-line warning %q", w)
		}
	}
	if len(resp.Warnings) != 1 {
		t.Errorf("warnings %v", resp.Warnings)
	}
}

var _ runtime.Object = &corev1.Pod{}

// TestMutateTimeSlicingWritesNoCompute: a TimeSlicing recommendation shares the GPU's
// time, so the webhook writes its memory but no compute limit (a reserved share would
// only keep co-tenants apart); an MPS one writes both.
func TestMutateTimeSlicingWritesNoCompute(t *testing.T) {
	for _, mode := range []gpufracv1.SharingMode{gpufracv1.SharingModeTimeSlicing, gpufracv1.SharingModeMPS} {
		gfa := autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi)
		cr := containerRec("main", "4Gi", "350m")
		cr.SharingMode = mode
		m := mutator(t, Config{}, gfa, recommendation("web", 80, cr))
		o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
		if o.skip != "" {
			t.Fatalf("%s: skipped: %s %v", mode, o.skip, o.warnings)
		}
		c := &got.Spec.Containers[0]
		if v, _ := resourceValue(c, "limits", "nvidia.com/gpumem"); v != 4096 {
			t.Errorf("%s: gpumem = %d, want 4096", mode, v)
		}
		_, hasCores := c.Resources.Limits["nvidia.com/gpucores"]
		if hasCores != (mode == gpufracv1.SharingModeMPS) {
			t.Errorf("%s: gpucores written %v, want %v", mode, hasCores, mode == gpufracv1.SharingModeMPS)
		}
	}
}

// TestMutateCapEventOnAutoscaler: a memory limit capped below the recommendation (the MPS
// replica share, or one GPU after overheads) is a warning to the pod's creator and a
// MemoryCapped event on the autoscaler, naming the container and both sizes; an uncapped
// pod and a dry run record none (issue 14 kind 14).
func TestMutateCapEventOnAutoscaler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend gpufracv1.BackendType
		cfg     Config
		mem     string
		dryRun  bool
		want    string // substring of the event note; "" = no MemoryCapped event
	}{
		{"mps above the replica share", gpufracv1.BackendMPS, Config{Config: backend.Config{MPS: backend.MPSConfig{ReplicaMemoryBytes: 10 << 30}}}, "12Gi", false, "recommended 12288MiB exceeds the MPS replica share 10240MiB"},
		{"mps within the share", gpufracv1.BackendMPS, Config{Config: backend.Config{MPS: backend.MPSConfig{ReplicaMemoryBytes: 10 << 30}}}, "8Gi", false, ""},
		{"mps above the share, dry run", gpufracv1.BackendMPS, Config{Config: backend.Config{MPS: backend.MPSConfig{ReplicaMemoryBytes: 10 << 30}}}, "12Gi", true, ""},
		{"hami above one GPU after overhead", gpufracv1.BackendHAMi, Config{Config: backend.Config{GPUMemoryBytes: 16 << 30, MemoryOverhead: map[gpufracv1.BackendType]int64{gpufracv1.BackendHAMi: 1 << 30}}}, "16Gi", false, "plus overhead exceeds one GPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mutator(t, tc.cfg, autoscaler("web", gpufracv1.UpdateModeInitial, tc.backend), recommendation("web", 80, containerRec("main", tc.mem, "")))
			rec := events.NewFakeRecorder(10)
			m.Events = rec
			req := createRequest(t, podOf(gpuContainer("main", 1)))
			req.DryRun = &tc.dryRun
			resp := m.Handle(context.Background(), req)
			if !resp.Allowed || len(resp.Patches) == 0 {
				t.Fatalf("pod not patched: %+v", resp)
			}
			var capped []string
			for len(rec.Events) > 0 {
				if e := <-rec.Events; strings.Contains(e, EventMemoryCapped) {
					capped = append(capped, e)
				}
			}
			if tc.want == "" {
				if len(capped) != 0 {
					t.Errorf("MemoryCapped events %v, want none", capped)
				}
				return
			}
			if len(capped) != 1 || !strings.Contains(capped[0], "container main") || !strings.Contains(capped[0], tc.want) {
				t.Errorf("MemoryCapped events %v, want one naming container main and %q", capped, tc.want)
			}
			if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tc.want) {
				t.Errorf("warnings %v, want the same note to the pod's creator", resp.Warnings)
			}
		})
	}
}

// TestMutateRollbackFloor: a rollback floor in status.updater.floor reaches new pods
// whatever the recommendation says: memory and compute are max(recommendation, floor),
// the applied record says what the pod holds; an expired floor is ignored (issue 14
// kind 6).
func TestMutateRollbackFloor(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name           string
		until          time.Time
		wantMiB, wantP int64 // gpumem backend.MiB, gpucores percent
		wantRecMem     string
	}{
		{"floor in force", now.Add(time.Hour), 6144, 40, "6Gi"},
		{"floor expired", now.Add(-time.Second), 4096, 25, "4Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
			gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{
				Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q("6Gi"), Compute: q("400m")}},
				Until:      metav1.NewTime(tc.until), Reason: "pod web-abc-x: CUDA out of memory"}}
			m := mutator(t, Config{}, gfa, recommendation("web", 80, containerRec("main", "4Gi", "250m")))
			m.Now = func() time.Time { return now }
			o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("skipped %s %v", o.skip, o.warnings)
			}
			c := &got.Spec.Containers[0]
			if v, _ := resourceValue(c, "limits", "nvidia.com/gpumem"); v != tc.wantMiB {
				t.Errorf("gpumem %d backend.MiB, want %d", v, tc.wantMiB)
			}
			if v, _ := resourceValue(c, "limits", "nvidia.com/gpucores"); v != tc.wantP {
				t.Errorf("gpucores %d, want %d", v, tc.wantP)
			}
			if rec, _ := gpufracv1.ParseApplied(got.Annotations); rec == nil || rec.Container("main").Memory.String() != tc.wantRecMem {
				t.Errorf("applied record %+v, want memory %s", rec, tc.wantRecMem)
			}
		})
	}
}

// Issue 14 kind 4: a GPU native sidecar next to a regular container without a GPU is
// matched and written like a regular container, by every backend, into
// spec.initContainers through the JSON patch; an init container that runs to completion
// is never written: its GPU alone does not match the pod, and next to a regular GPU
// container (hami) it is left as the pod asks while the regular container is patched.
func TestMutateInitContainersAndNativeSidecars(t *testing.T) {
	sidecarPod := func() *corev1.Pod {
		side := gpuContainer("gpu-server", 1)
		side.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		p := podOf(corev1.Container{Name: "app", Image: "img"})
		p.Spec.InitContainers = []corev1.Container{{Name: "wait", Image: "img"}, side}
		return p
	}
	side := containerRec("gpu-server", "2Gi", "200m")
	side.ContainerType, side.SharingMode = gpufracv1.ContainerTypeSidecar, gpufracv1.SharingModeMPS
	for _, b := range backend.Types {
		if b == gpufracv1.BackendDRA {
			continue // writes a claim template through the API: backend.TestRoundTripNativeSidecar
		}
		t.Run(string(b), func(t *testing.T) {
			m := mutator(t, Config{}, autoscaler("web", gpufracv1.UpdateModeInitial, b), recommendation("web", 80, side))
			if mode, ok := backend.DevicePluginMode(b); ok {
				m = planMutator(t, autoscaler("web", gpufracv1.UpdateModeInitial, b), recommendation("web", 80, side), plantest.Policy("pool", mode, 4, true))
			}
			o, _, got := handle(t, m, sidecarPod())
			if o.skip != "" {
				t.Fatalf("skipped %s %v", o.skip, o.warnings)
			}
			rec, err := gpufracv1.ParseApplied(got.Annotations)
			if err != nil || rec == nil || len(rec.Containers) != 1 || rec.Containers[0].Name != "gpu-server" || rec.Containers[0].Memory.String() != "2Gi" {
				t.Fatalf("applied %+v (%v), want the sidecar at 2Gi", rec, err)
			}
			s := &got.Spec.InitContainers[1]
			switch b {
			case gpufracv1.BackendHAMi:
				if v, _ := resourceValue(s, "limits", "nvidia.com/gpumem"); v != 2048 {
					t.Errorf("sidecar gpumem %d", v)
				}
			case gpufracv1.BackendMPS:
				if v, _ := env(s, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); v != "0=2048M" {
					t.Errorf("sidecar env %v", s.Env)
				}
			case gpufracv1.BackendKAI, gpufracv1.BackendKAINVFractions:
				if _, ok := s.Resources.Limits["nvidia.com/gpu"]; ok || got.Annotations["gpu-fraction-container-name"] != "gpu-server" {
					t.Errorf("sidecar limits %v, container name %q", s.Resources.Limits, got.Annotations["gpu-fraction-container-name"])
				}
			case gpufracv1.BackendAnnotations:
				if got.Annotations["gpufrac.io/container.gpu-server.gpu-memory"] != "2Gi" {
					t.Errorf("annotations %v", got.Annotations)
				}
			case gpufracv1.BackendNVIDIATimeSlicing, gpufracv1.BackendNVIDIAMPS:
				if v, _ := resourceValue(s, "limits", "nvidia.com/gpu"); v != 1 || got.Spec.NodeSelector[gpufracv1.DevicePluginConfigLabel] != "gpufrac-pool" {
					t.Errorf("sidecar gpu %d, nodeSelector %v", v, got.Spec.NodeSelector)
				}
			}
			if app, wait := got.Spec.Containers[0], got.Spec.InitContainers[0]; len(app.Resources.Limits)+len(app.Env)+len(wait.Resources.Limits)+len(wait.Env) != 0 {
				t.Errorf("other containers changed: %+v %+v", app, wait)
			}
		})
	}

	warm := containerRec("warmup", "6Gi", "900m")
	warm.ContainerType = gpufracv1.ContainerTypeInit
	initPod := func(main corev1.Container) *corev1.Pod {
		p := podOf(main)
		p.Spec.InitContainers = []corev1.Container{gpuContainer("warmup", 1)}
		return p
	}
	m := mutator(t, Config{}, autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi), recommendation("web", 80, containerRec("main", "2Gi", ""), warm))
	if o, _, _ := handle(t, m, initPod(corev1.Container{Name: "main", Image: "img"})); o.skip != SkipNoGPU {
		t.Errorf("a GPU only in an init container: %q, want %s", o.skip, SkipNoGPU)
	}
	o, _, got := handle(t, m, initPod(gpuContainer("main", 1)))
	if o.skip != "" {
		t.Fatalf("pod with a GPU init container skipped: %s %v", o.skip, o.warnings)
	}
	if v, _ := resourceValue(&got.Spec.Containers[0], "limits", "nvidia.com/gpumem"); v != 2048 {
		t.Errorf("main gpumem %d, want 2048", v)
	}
	if l := got.Spec.InitContainers[0].Resources.Limits; len(l) != 1 {
		t.Errorf("init container written: %v", l)
	}
	if rec, _ := gpufracv1.ParseApplied(got.Annotations); rec == nil || len(rec.Containers) != 1 || rec.Containers[0].Name != "main" {
		t.Errorf("applied %+v, want main only", rec)
	}
}

// TestMutateNVFractionsObservedPeak: with --nvfractions-request=observed-peak the
// request is the recommendation's observed memory peak plus the overhead, the limit the
// upper bound plus the overhead, and the applied record keeps the target (what the
// updater compares); under a rollback floor the request is the floor, not the peak.
func TestMutateNVFractionsObservedPeak(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		floor      bool
		wantReq    string
		wantLimit  string
		wantRecMem string
	}{
		{"peak below the target", false, "3584Mi", "8704Mi", "4Gi"},
		{"rollback floor in force", true, "6656Mi", "8704Mi", "6Gi"},
		// The recommender has raised its target to the floor (policy.ApplyFloor): the
		// request still holds the floor (it was the 3Gi peak, 3584Mi).
		{"rollback floor in force, target at the floor", true, "6656Mi", "8704Mi", "6Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendKAINVFractions)
			if tc.floor {
				gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{
					Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q("6Gi")}},
					Until:      metav1.NewTime(now.Add(time.Hour)), Reason: "pod web-abc-x: CUDA out of memory"}}
			}
			rec := containerRec("main", "4Gi", "")
			if strings.Contains(tc.name, "target at the floor") {
				rec.Target.Memory = q("6Gi")
			}
			rec.ObservedPeakMemory, rec.UpperBound.Memory = q("3Gi"), q("8Gi")
			cfg := Config{}
			cfg.NVFractions.Request = backend.NVFractionsRequestObservedPeak
			cfg.MemoryOverhead = map[gpufracv1.BackendType]int64{gpufracv1.BackendKAINVFractions: 512 << 20}
			m := mutator(t, cfg.WithDefaults(), gfa, recommendation("web", 80, rec))
			m.Now = func() time.Time { return now }
			o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("skipped %s %v", o.skip, o.warnings)
			}
			if r, l := got.Annotations["nvidia.com/container.main.gpu-memory.request"], got.Annotations["nvidia.com/container.main.gpu-memory.limit"]; r != tc.wantReq || l != tc.wantLimit {
				t.Errorf("request %q limit %q, want %s %s", r, l, tc.wantReq, tc.wantLimit)
			}
			ac := (*gpufracv1.AppliedContainer)(nil)
			if r, _ := gpufracv1.ParseApplied(got.Annotations); r != nil {
				ac = r.Container("main")
			}
			if ac == nil || ac.Memory.String() != tc.wantRecMem || ac.WrittenMemory.String() != tc.wantReq {
				t.Errorf("applied record %+v, want memory %s written %s", ac, tc.wantRecMem, tc.wantReq)
			}
		})
	}
}

// TestMutateMemoryLimit: a recommendation with a memoryLimit above its target (the
// spread's burst room) is written by the annotations backend as the limit
// (gpufrac.io/gpu-memory), with the observed peak as the request, and the applied record
// keeps the target, which the updater compares (contract.Target.Memory), with the limit
// as what was written; without one the target is the limit as before.
func TestMutateMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, limit, wantMem string
	}{
		{"limit above the target", "6Gi", "6Gi"},
		{"no limit", "", "4Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendAnnotations)
			rec := containerRec("main", "4Gi", "")
			rec.ObservedPeakMemory = q("3Gi")
			if tc.limit != "" {
				rec.MemoryLimit = q(tc.limit)
			}
			m := mutator(t, Config{}.WithDefaults(), gfa, recommendation("web", 80, rec))
			o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("skipped %s %v", o.skip, o.warnings)
			}
			if mem, req := got.Annotations["gpufrac.io/gpu-memory"], got.Annotations["gpufrac.io/gpu-memory-request"]; mem != tc.wantMem || req != "3Gi" {
				t.Errorf("gpu-memory %q request %q, want %s 3Gi", mem, req, tc.wantMem)
			}
			ac := (*gpufracv1.AppliedContainer)(nil)
			if r, _ := gpufracv1.ParseApplied(got.Annotations); r != nil {
				ac = r.Container("main")
			}
			if ac == nil || ac.Memory.String() != "4Gi" || ac.WrittenMemory.String() != tc.wantMem || ac.WrittenMemoryRequest == nil || ac.WrittenMemoryRequest.String() != "3Gi" {
				t.Errorf("applied record %+v, want memory 4Gi (the target), written %s, request 3Gi", ac, tc.wantMem)
			}
		})
	}
}

// TestMutateYoungShare: a young workload whose memoryLimit is at its share of the GPU
// (its upper bound; contract.Target.YoungShare) is written at the share: the limit, and
// the applied record the updater compares, with the observed peak times the young
// margin as the request and no warning (it is no minMemory raise); a mature one
// keeps its target in the record.
func TestMutateYoungShare(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		margin               int32
		target, share, limit string // limit: the gpu-memory annotation
		overhead             string
		wantRecord, req      string
	}{
		{"young: the share", 50, "12Gi", "20Gi", "20Gi", "", "20Gi", "6Gi"},
		{"mature: the target", 0, "12Gi", "20Gi", "20Gi", "", "12Gi", "4Gi"},
		// A share of the whole GPU plus overhead is capped at one GPU without the
		// warning a need above one GPU gets: the share is room, not need.
		{"young: the whole GPU, with overhead", 50, "45Gi", "80Gi", "80Gi", "256Mi", "80Gi", "6400Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendAnnotations)
			if tc.overhead != "" {
				gfa.Spec.Backend.MemoryOverhead = q(tc.overhead)
			}
			rec := containerRec("main", tc.target, "")
			rec.ObservedPeakMemory = q("4Gi")
			rec.UpperBound.Memory = q(tc.share) // a quarter of 80Gi, or all of it
			rec.MemoryLimit = q(tc.share)
			rec.YoungMarginPercent = tc.margin
			m := mutator(t, Config{}.WithDefaults(), gfa, recommendation("web", 80, rec))
			o, resp, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("skipped %s %v", o.skip, o.warnings)
			}
			if mem, req := got.Annotations["gpufrac.io/gpu-memory"], got.Annotations["gpufrac.io/gpu-memory-request"]; mem != tc.limit || req != tc.req {
				t.Errorf("gpu-memory %q request %q, want %s %s", mem, req, tc.limit, tc.req)
			}
			r, _ := gpufracv1.ParseApplied(got.Annotations)
			if ac := r.Container("main"); ac == nil || ac.Memory.String() != tc.wantRecord {
				t.Errorf("applied record %+v, want memory %s", ac, tc.wantRecord)
			}
			if len(resp.Warnings) > 0 {
				t.Errorf("warnings %v, want none", resp.Warnings)
			}
		})
	}
}

// TestMutateComputeRequest: a TimeSlicing recommendation's computeRequest is written by
// the annotations backend as a placement request (gpufrac.io/gpu-compute-request and
// the per-container key), with no gpu-compute limit; an MPS recommendation writes its
// compute target as before and no request; a backend without a placement-only compute
// field (hami) writes neither for the time-sliced pod.
func TestMutateComputeRequest(t *testing.T) {
	sliced := containerRec("main", "4Gi", "350m")
	sliced.SharingMode = gpufracv1.SharingModeTimeSlicing
	sliced.ComputeRequest = q("120m")
	mps := containerRec("main", "4Gi", "350m")
	mps.SharingMode = gpufracv1.SharingModeMPS
	mps.ComputeRequest = q("120m")
	for _, tc := range []struct {
		name             string
		backend          gpufracv1.BackendType
		rec              gpufracv1.ContainerRecommendation
		request, compute string // annotations; "" = absent
		gpucores         int64  // hami limit; -1 = absent
		// computeOnly: the container policy controls compute only.
		computeOnly bool
	}{
		{name: "time-sliced, annotations", backend: gpufracv1.BackendAnnotations, rec: sliced, request: "120m", gpucores: -1},
		// The request is all a compute-only policy writes for a time-sliced container
		// (it was left out: no-matching-container, nothing written).
		{name: "time-sliced, compute only, annotations", backend: gpufracv1.BackendAnnotations, rec: sliced, request: "120m", gpucores: -1, computeOnly: true},
		{name: "MPS, annotations", backend: gpufracv1.BackendAnnotations, rec: mps, compute: "350m", gpucores: -1},
		{name: "time-sliced, hami", backend: gpufracv1.BackendHAMi, rec: sliced, gpucores: -1},
	} {
		gfa := autoscaler("web", gpufracv1.UpdateModeInitial, tc.backend)
		if tc.computeOnly {
			gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{
				{ContainerName: "*", ControlledResources: []gpufracv1.GPUResourceName{gpufracv1.ResourceCompute}}}}
		}
		m := mutator(t, Config{}, gfa, recommendation("web", 80, tc.rec))
		o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
		if o.skip != "" {
			t.Fatalf("%s: skipped: %s %v", tc.name, o.skip, o.warnings)
		}
		if _, mem := got.Annotations[gpufracv1.AnnotationGPUMemory]; tc.backend == gpufracv1.BackendAnnotations && mem == tc.computeOnly {
			t.Errorf("%s: gpu-memory written %v, want %v", tc.name, mem, !tc.computeOnly)
		}
		for key, want := range map[string]string{
			gpufracv1.AnnotationGPUComputeRequest: tc.request,
			gpufracv1.AnnotationContainerPrefix + "main" + gpufracv1.AnnotationContainerComputeRequestSuffix: tc.request,
			gpufracv1.AnnotationGPUCompute: tc.compute,
		} {
			if g := got.Annotations[key]; g != want {
				t.Errorf("%s: %s = %q, want %q", tc.name, key, g, want)
			}
		}
		v, ok := resourceValue(&got.Spec.Containers[0], "limits", "nvidia.com/gpucores")
		if !ok {
			v = -1
		}
		if v != tc.gpucores {
			t.Errorf("%s: gpucores %d, want %d", tc.name, v, tc.gpucores)
		}
		// The applied record keeps the request written, as the allocated-GPUs gauge reads it.
		var recorded string
		if r, _ := gpufracv1.ParseApplied(got.Annotations); r != nil {
			if ac := r.Container("main"); ac != nil && ac.WrittenComputeRequest != nil {
				recorded = ac.WrittenComputeRequest.String()
			}
		}
		if recorded != tc.request {
			t.Errorf("%s: applied record's writtenComputeRequest %q, want %q", tc.name, recorded, tc.request)
		}
	}
}

// An older autoscaler whose targetRef names the workload's kind and name in another
// API group (extensions/v1beta1, admitted while the validating webhook was down) does
// not target it: the recommender and the updater cannot resolve it and put the other
// autoscaler in charge, so the webhook writes the other's recommendation too, instead
// of admitting every pod unchanged for the older one.
func TestMutateIgnoresAutoscalerOfAnotherGroup(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, apiVersion := range []string{"extensions/v1beta1", "apps/v1/extra"} {
		t.Run(apiVersion, func(t *testing.T) {
			old := autoscaler("a-web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
			old.CreationTimestamp = metav1.NewTime(t0)
			old.Spec.TargetRef.APIVersion = apiVersion
			cur := autoscaler("z-web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
			cur.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
			m := mutator(t, Config{}, old, cur, recommendation("z-web", 80, containerRec("main", "2Gi", "")))
			o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("skipped %s %v: want z-web's recommendation", o.skip, o.warnings)
			}
			if v, _ := resourceValue(&got.Spec.Containers[0], "limits", "nvidia.com/gpumem"); v != 2048 {
				t.Errorf("gpumem %d MiB, want 2048 (z-web's recommendation)", v)
			}
			if len(o.warnings) > 0 && strings.Contains(strings.Join(o.warnings, " "), "a-web") {
				t.Errorf("warnings %v name a-web as a duplicate", o.warnings)
			}
		})
	}
}

// TestMutateSkipsAutoscalerBeingDeleted: an autoscaler being deleted (a finalizer holds
// it, e.g. foreground deletion) writes nothing into new pods, as the updater ignores it.
func TestMutateSkipsAutoscalerBeingDeleted(t *testing.T) {
	gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
	gfa.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	gfa.Finalizers = []string{"foregroundDeletion"}
	m := mutator(t, Config{}, gfa, recommendation("web", 80, containerRec("main", "2Gi", "")))
	o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
	if o.skip != SkipAutoscalerDeleting {
		t.Fatalf("skip %q, want %q", o.skip, SkipAutoscalerDeleting)
	}
	if _, ok := resourceValue(&got.Spec.Containers[0], "limits", "nvidia.com/gpumem"); ok {
		t.Error("gpumem written for an autoscaler being deleted")
	}
}

// A pod whose annotations are close to the API server's limit (256 kB in all, the
// tools that stamp config hashes or last-applied configurations into pods get there)
// must be created, with or without gpufrac: a patch that takes the annotations past
// the limit makes the API server reject the pod after admission, whatever the
// webhook's failurePolicy. Each backend either patches within the limit or admits the
// pod unchanged, with a warning; the control (small annotations) is patched.
func TestMutateNeverTakesAnnotationsPastTheLimit(t *testing.T) {
	for _, bt := range []gpufracv1.BackendType{gpufracv1.BackendHAMi, gpufracv1.BackendAnnotations, gpufracv1.BackendKAI, gpufracv1.BackendKAINVFractions, gpufracv1.BackendMPS} {
		for _, room := range []int{64, 4096} { // bytes left below the limit
			t.Run(fmt.Sprintf("%s/%d bytes left", bt, room), func(t *testing.T) {
				gfa := autoscaler("web", gpufracv1.UpdateModeInitial, bt)
				gfr := recommendation("web", 80, containerRec("main", "4Gi", "350m"))
				m := mutator(t, Config{}, gfa, gfr)
				pod := podOf(gpuContainer("main", 1))
				const key = "example.com/last-applied"
				pod.Annotations = map[string]string{key: strings.Repeat("x", apivalidation.TotalAnnotationSizeLimitB-len(key)-room)}
				if err := apivalidation.ValidateAnnotationsSize(pod.Annotations); err != nil {
					t.Fatal(err)
				}
				o, resp, got := handle(t, m, pod)
				if errs := apivalidation.ValidateAnnotations(got.Annotations, field.NewPath("metadata", "annotations")); len(errs) > 0 {
					t.Fatalf("the patched pod would be rejected: %v", errs.ToAggregate())
				}
				if room >= 4096 && o.skip != "" {
					t.Errorf("control: skipped %s %v, want patched", o.skip, o.warnings)
				}
				if o.skip != "" && (o.skip != backend.UnsafeAnnotationsSize || len(resp.Warnings) == 0 || len(resp.Patches) != 0) {
					t.Errorf("skipped %s, warnings %v, patches %d: want %s, a warning and the pod unchanged", o.skip, resp.Warnings, len(resp.Patches), backend.UnsafeAnnotationsSize)
				}
			})
		}
	}
}

// effectiveEnv is the value the kubelet gives a container for name: its last definition
// in env (kubelet makeEnvironmentVariables; the API server only warns that a later one
// "hides previous definition"), "" and false when it has none or it is not a plain value.
func effectiveEnv(c *corev1.Container, name string) (string, bool) {
	v, ok := "", false
	for _, e := range c.Env {
		if e.Name == name {
			v, ok = e.Value, e.ValueFrom == nil
		}
	}
	return v, ok
}

// A container may define the MPS variables more than once (a merged kustomization, a
// chart value appended to a template's env): the API server accepts it with a warning
// and the kubelet gives the process the last definition. The webhook must write its
// limits into the definition that counts, or the pod runs with the template's value
// (less memory than its recommendation, or more than its share of the GPU) while its
// applied record says otherwise.
func TestMutateMPSDuplicateEnv(t *testing.T) {
	const pinned, threads = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	fromCM := &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "mps"}, Key: "limit"}}
	for _, tc := range []struct {
		name string
		env  []corev1.EnvVar
	}{
		{"a lower value defined again", []corev1.EnvVar{{Name: pinned, Value: "0=4096M"}, {Name: pinned, Value: "0=512M"}}},
		{"a higher value defined again after another variable", []corev1.EnvVar{{Name: pinned, Value: "0=1024M"}, {Name: "A", Value: "1"}, {Name: pinned, Value: "0=60000M"}}},
		{"defined again from a ConfigMap", []corev1.EnvVar{{Name: pinned, Value: "0=1024M"}, {Name: pinned, ValueFrom: fromCM}}},
		{"three times, both variables", []corev1.EnvVar{{Name: threads, Value: "100"}, {Name: pinned, Value: "0=1M"}, {Name: threads, Value: "5"}, {Name: pinned, Value: "0=2M"}, {Name: pinned, Value: "0=3M"}}},
		{"once (control)", []corev1.EnvVar{{Name: pinned, Value: "0=9M"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mutator(t, Config{}, autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendMPS), recommendation("web", 60, containerRec("main", "2Gi", "200m")))
			c := gpuContainer("main", 1)
			c.Env = tc.env
			o, _, got := handle(t, m, podOf(c))
			if o.skip != "" {
				t.Fatalf("skipped %s %v", o.skip, o.warnings)
			}
			gc := &got.Spec.Containers[0]
			if v, ok := effectiveEnv(gc, pinned); !ok || v != "0=2048M" {
				t.Errorf("%s the process gets: %q (plain %v), want 0=2048M; env %v", pinned, v, ok, gc.Env)
			}
			if v, ok := effectiveEnv(gc, threads); !ok || v != "20" {
				t.Errorf("%s the process gets: %q (plain %v), want 20; env %v", threads, v, ok, gc.Env)
			}
			// What the updater reads back is what the record says was written.
			rec, _ := gpufracv1.ParseApplied(got.Annotations)
			a := m.Backends[gpufracv1.BackendMPS].Read(got)["main"]
			if ac := rec.Container("main"); ac == nil || a.Memory != ac.WrittenMemory.Value() {
				t.Errorf("read back %d bytes, record %+v", a.Memory, ac)
			}
		})
	}
}

// The pod webhook is registered with reinvocationPolicy IfNeeded: when a later webhook
// changes the pod, the API server calls it again with the pod it already patched. That
// call changes nothing and must not count as a second patched pod
// (gpufrac_admission_patches_total is the number of pods given a fraction) nor repeat
// the first call's events on the autoscaler.
func TestMutateReinvocationCountsOnePatch(t *testing.T) {
	for _, tc := range []struct {
		bt  gpufracv1.BackendType
		cfg Config
		mem string
	}{
		{gpufracv1.BackendHAMi, Config{}, "2Gi"},
		{gpufracv1.BackendKAI, Config{}, "2Gi"},
		{gpufracv1.BackendMPS, Config{}, "2Gi"},
		{gpufracv1.BackendAnnotations, Config{}, "2Gi"},
		// Capped at one GPU: a MemoryCapped event on the first call only.
		{gpufracv1.BackendHAMi, Config{Config: backend.Config{MemoryOverhead: map[gpufracv1.BackendType]int64{gpufracv1.BackendHAMi: 2 << 30}}}, "79Gi"},
	} {
		t.Run(string(tc.bt)+"/"+tc.mem, func(t *testing.T) {
			m := mutator(t, tc.cfg, autoscaler("web", gpufracv1.UpdateModeRecreate, tc.bt), recommendation("web", 60, containerRec("main", tc.mem, "200m")))
			rec := events.NewFakeRecorder(10)
			m.Events = rec
			patches := patchesTotal.WithLabelValues(string(tc.bt))
			patchedReqs := requestsTotal.WithLabelValues(WebhookMutatePods, "patched")
			p0, r0 := testutil.ToFloat64(patches), testutil.ToFloat64(patchedReqs)

			req := createRequest(t, podOf(gpuContainer("main", 1)))
			first := m.Handle(context.Background(), req)
			if len(first.Patches) == 0 {
				t.Fatalf("first call did not patch: %v", first.Warnings)
			}
			firstEvents := len(rec.Events)
			again := m.Handle(context.Background(), createRequest(t, patched(t, req, first)))
			if !again.Allowed || len(again.Patches) != 0 {
				t.Fatalf("reinvocation: allowed %v, patches %v", again.Allowed, again.Patches)
			}
			if got := testutil.ToFloat64(patches) - p0; got != 1 {
				t.Errorf("patches_total{backend=%s} +%v after one pod called twice, want +1", tc.bt, got)
			}
			if got := testutil.ToFloat64(patchedReqs) - r0; got != 1 {
				t.Errorf("requests_total{outcome=patched} +%v, want +1", got)
			}
			if n := len(rec.Events) - firstEvents; n != 0 {
				t.Errorf("reinvocation recorded %d more events", n)
			}
		})
	}
}

// The documented remedy for a workload out of memory is to raise minMemory in its
// container policy (docs/alerts.md). Until the recommender writes again (it runs a cycle
// on the change; while it cannot read Prometheus it keeps the last recommendation
// exactly as it was, however the policy changed) the recommendation is below the new
// floor: new pods must get the floor at once, never less than the user says the
// container needs. A floor the recommendation already meets changes nothing.
func TestMutateMinMemoryAboveTheRecommendation(t *testing.T) {
	const gpu = 80 << 30
	for _, tc := range []struct {
		name      string
		container string // the policy's containerName
		min       string
		bt        gpufracv1.BackendType
		wantMiB   int64
		warn      bool
	}{
		{"no minMemory", "main", "", gpufracv1.BackendHAMi, 2048, false},
		{"minMemory below the target", "main", "1Gi", gpufracv1.BackendHAMi, 2048, false},
		{"minMemory equal to the target", "main", "2Gi", gpufracv1.BackendHAMi, 2048, false},
		{"minMemory raised above the target", "main", "8Gi", gpufracv1.BackendHAMi, 8192, true},
		{"raised, from the * policy", "*", "6000Mi", gpufracv1.BackendHAMi, 6000, true},
		{"raised, kai gpu-memory", "main", "8Gi", gpufracv1.BackendKAI, 8192, true},
		{"raised, annotations", "main", "3Gi", gpufracv1.BackendAnnotations, 3072, true},
		// The recommendation holds minMemory (the recommender caught up): the request
		// holds it too, not the 1Gi peak (it did only while the recommendation was below).
		{"minMemory equal to the target, annotations", "main", "2Gi", gpufracv1.BackendAnnotations, 2048, false},
		{"raised past one GPU: one GPU", "main", "100Gi", gpufracv1.BackendHAMi, gpu >> 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, tc.bt)
			if tc.min != "" {
				gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: tc.container, MinMemory: q(tc.min)}}}
			}
			r := containerRec("main", "2Gi", "")
			r.ObservedPeakMemory = q("1Gi")
			m := mutator(t, Config{Config: backend.Config{GPUMemoryBytes: gpu}}, gfa, recommendation("web", 80, r))
			resp, got, ac := admitMain(t, m, tc.wantMiB)
			if a := m.Backends[tc.bt].Read(got)["main"]; a.Memory != tc.wantMiB<<20 {
				t.Errorf("the pod holds %d bytes, want %d MiB", a.Memory, tc.wantMiB)
			}
			// The record says what the pod holds, as under a rollback floor.
			if wantRec := max(int64(2<<30), tc.wantMiB<<20); ac.Memory.Value() != wantRec {
				t.Errorf("record memory %s, want %d MiB", ac.Memory, wantRec>>20)
			}
			// A request below the floor would let the pod be packed below it.
			if r := ac.WrittenMemoryRequest; r != nil && tc.min != "" && r.Value() < min(q(tc.min).Value(), gpu) {
				t.Errorf("memory request %s below the floor %s", r, tc.min)
			}
			if (len(resp.Warnings) > 0) != tc.warn {
				t.Errorf("warnings %v, want some: %v", resp.Warnings, tc.warn)
			}
		})
	}
}

// A dry-run pod CREATE (kubectl create --dry-run=server) creates no pod: it is patched
// like any other (the caller sees what the webhook would write) but is no pod given a
// fraction (gpufrac_admission_patches_total) nor a GPU pod admitted unchanged
// (gpufrac_admission_skipped_total); requests_total counts it as a request.
func TestMutateDryRunCountsNoPod(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   gpufracv1.UpdateMode
		dryRun bool
	}{
		{"patched", gpufracv1.UpdateModeRecreate, false},
		{"patched, dry run", gpufracv1.UpdateModeRecreate, true},
		{"mode off", gpufracv1.UpdateModeOff, false},
		{"mode off, dry run", gpufracv1.UpdateModeOff, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mutator(t, Config{}, autoscaler("web", tc.mode, gpufracv1.BackendHAMi), recommendation("web", 80, containerRec("main", "2Gi", "")))
			patches, skipped := patchesTotal.WithLabelValues(string(gpufracv1.BackendHAMi)), skippedTotal.WithLabelValues(SkipModeOff)
			p0, s0 := testutil.ToFloat64(patches), testutil.ToFloat64(skipped)
			req := createRequest(t, podOf(gpuContainer("main", 1)))
			req.DryRun = &tc.dryRun
			resp := m.Handle(context.Background(), req)
			if wantPatch := tc.mode != gpufracv1.UpdateModeOff; (len(resp.Patches) > 0) != wantPatch {
				t.Fatalf("patches %v, want some: %v", resp.Patches, wantPatch)
			}
			count := 0.0
			if !tc.dryRun {
				count = 1
			}
			if tc.mode == gpufracv1.UpdateModeOff {
				if got := testutil.ToFloat64(skipped) - s0; got != count {
					t.Errorf("skipped_total{reason=mode-off} +%v, want +%v", got, count)
				}
			} else if got := testutil.ToFloat64(patches) - p0; got != count {
				t.Errorf("patches_total +%v, want +%v", got, count)
			}
		})
	}
}

// TestMutateContainerAskingForNoGPU: a pod whose container asks for nvidia.com/gpu: 0
// (a chart's way to turn its GPU off), while the workload's recommendation still names
// the container, is admitted unchanged with a warning by every backend that gives a
// fraction of a GPU; before, kai and kai-nvfractions wrote a fraction (a GPU share the
// pod did not ask for) and mps wrote its limits and a record of memory the pod holds.
func TestMutateContainerAskingForNoGPU(t *testing.T) {
	// annotations: before, it wrote the container's 2Gi and 200m (and counted them in
	// the pod totals) though its GPU is turned off.
	for _, bt := range []gpufracv1.BackendType{gpufracv1.BackendHAMi, gpufracv1.BackendKAI, gpufracv1.BackendKAINVFractions, gpufracv1.BackendMPS, gpufracv1.BackendAnnotations} {
		t.Run(string(bt), func(t *testing.T) {
			m := mutator(t, Config{}, autoscaler("web", gpufracv1.UpdateModeRecreate, bt), recommendation("web", 60, containerRec("main", "2Gi", "200m")))
			o, resp, got := handle(t, m, podOf(gpuContainer("main", 0)))
			if o.skip == "" || len(resp.Patches) != 0 || len(resp.Warnings) == 0 {
				t.Fatalf("skip %q, patches %v, warnings %v; want the pod unchanged with a warning", o.skip, resp.Patches, resp.Warnings)
			}
			if len(got.Annotations) != 0 || got.Spec.SchedulerName != corev1.DefaultSchedulerName {
				t.Errorf("pod changed: annotations %v, scheduler %s", got.Annotations, got.Spec.SchedulerName)
			}
		})
	}
	// Next to a GPU container, the annotations backend writes that one alone and the pod
	// totals count it alone.
	m := mutator(t, Config{}, autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendAnnotations),
		recommendation("web", 60, containerRec("main", "2Gi", "200m"), containerRec("off", "3Gi", "100m")))
	o, _, got := handle(t, m, podOf(gpuContainer("main", 1), gpuContainer("off", 0)))
	if o.skip != "" {
		t.Fatalf("skipped %s %v", o.skip, o.warnings)
	}
	if a := got.Annotations; a["gpufrac.io/gpu-memory"] != "2Gi" || a["gpufrac.io/gpu-compute"] != "200m" || a["gpufrac.io/container.off.gpu-memory"] != "" {
		t.Errorf("annotations %v, want main's 2Gi and 200m alone", a)
	}
}

// A gpufrac.io/applied record copied from a live pod's YAML into the workload's template
// comes with every new pod. When the webhook writes nothing into the pod (any skip), that
// record is not what the pod holds: it is removed, with a warning, and the pod is still
// admitted. A pod the webhook patches gets its own record; a reinvocation keeps the
// record the first call wrote.
func TestMutateCopiedRecordRemovedWhenNothingWritten(t *testing.T) {
	const copied = `{"backend":"hami","autoscaler":"web","recommendationGeneration":2,"recommendationResourceVersion":"41","confidencePercent":90,"containers":[{"name":"main","memory":"4Gi","writtenMemory":"4Gi"}]}`
	withRecord := func(p *corev1.Pod) *corev1.Pod {
		p.Annotations = map[string]string{gpufracv1.AnnotationApplied: copied, "team": "a"}
		return p
	}
	notSynced := func() bool { return false }
	for _, tc := range []struct {
		name    string
		objs    []client.Object
		synced  func() bool
		pod     func() *corev1.Pod
		skip    string // "" when patched
		removed bool
	}{
		{"updateMode Off", []client.Object{autoscaler("web", gpufracv1.UpdateModeOff, gpufracv1.BackendHAMi), recommendation("web", 90, containerRec("main", "2Gi", "200m"))},
			nil, func() *corev1.Pod { return withRecord(podOf(gpuContainer("main", 1))) }, SkipModeOff, true},
		{"low confidence", []client.Object{autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi), recommendation("web", 1, containerRec("main", "2Gi", "200m"))},
			nil, func() *corev1.Pod { return withRecord(podOf(gpuContainer("main", 1))) }, SkipLowConfidence, true},
		{"no autoscaler", nil,
			nil, func() *corev1.Pod { return withRecord(podOf(gpuContainer("main", 1))) }, SkipNoAutoscaler, true},
		{"no recommendation", []client.Object{autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)},
			nil, func() *corev1.Pod { return withRecord(podOf(gpuContainer("main", 1))) }, SkipNoRecommendation, true},
		{"caches not synced", []client.Object{autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi), recommendation("web", 90, containerRec("main", "2Gi", "200m"))},
			notSynced, func() *corev1.Pod { return withRecord(podOf(gpuContainer("main", 1))) }, SkipNotReady, true},
		{"unsafe shape (kai, bound to its node)", []client.Object{autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendKAI), recommendation("web", 90, containerRec("main", "2Gi", "200m"))},
			nil, func() *corev1.Pod {
				p := withRecord(podOf(gpuContainer("main", 1)))
				p.Spec.NodeName = "n1"
				return p
			}, backend.UnsafeNodeBound, true},
		{"no record: unchanged as before", []client.Object{autoscaler("web", gpufracv1.UpdateModeOff, gpufracv1.BackendHAMi)},
			nil, func() *corev1.Pod { return podOf(gpuContainer("main", 1)) }, SkipModeOff, false},
		{"patched: its own record", []client.Object{autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi), recommendation("web", 90, containerRec("main", "2Gi", "200m"))},
			nil, func() *corev1.Pod { return withRecord(podOf(gpuContainer("main", 1))) }, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mutator(t, Config{}, tc.objs...)
			m.Synced = tc.synced
			removed := recordsRemovedTotal.WithLabelValues(tc.skip)
			r0 := testutil.ToFloat64(removed)
			o, resp, got := handle(t, m, tc.pod())
			if o.skip != tc.skip {
				t.Fatalf("skip %q, want %q (%v)", o.skip, tc.skip, o.warnings)
			}
			rec, has := got.Annotations[gpufracv1.AnnotationApplied]
			switch {
			case tc.skip == "":
				if !has || rec == copied {
					t.Fatalf("patched pod's record %q, want its own", rec)
				}
			case tc.removed:
				if has {
					t.Fatalf("record kept on a pod admitted without a fraction (%s): %s", tc.skip, rec)
				}
				if got.Annotations["team"] != "a" {
					t.Errorf("other annotations lost: %v", got.Annotations)
				}
				if !slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.Contains(w, gpufracv1.AnnotationApplied) }) {
					t.Errorf("no warning names the removed record: %v", resp.Warnings)
				}
				if d := testutil.ToFloat64(removed) - r0; d != 1 {
					t.Errorf("records_removed_total{reason=%s} +%v, want +1", tc.skip, d)
				}
			default:
				if len(resp.Patches) != 0 {
					t.Fatalf("patches on a pod without a record: %v", resp.Patches)
				}
			}
		})
	}

	// Reinvocation (reinvocationPolicy IfNeeded): the second call sees the record the
	// first wrote, which is what it would write now: kept, no patch.
	m := mutator(t, Config{}, autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi), recommendation("web", 90, containerRec("main", "2Gi", "200m")))
	req := createRequest(t, withRecord(podOf(gpuContainer("main", 1))))
	first := m.Handle(context.Background(), req)
	pod := patched(t, req, first)
	again := m.Handle(context.Background(), createRequest(t, pod))
	if len(again.Patches) != 0 {
		t.Fatalf("reinvocation patched %v", again.Patches)
	}
	if pod.Annotations[gpufracv1.AnnotationApplied] == "" {
		t.Fatal("the first call's record is missing")
	}
}

// admitMain admits a pod with one GPU container, main, through m and returns the
// response, the mutated pod and main's applied record; it fails the test when the pod
// is skipped or the record does not say wantMiB MiB written.
func admitMain(t *testing.T, m *Mutator, wantMiB int64) (admission.Response, *corev1.Pod, *gpufracv1.AppliedContainer) {
	t.Helper()
	o, resp, got := handle(t, m, podOf(gpuContainer("main", 1)))
	if o.skip != "" {
		t.Fatalf("skipped %s %v", o.skip, o.warnings)
	}
	rec, _ := gpufracv1.ParseApplied(got.Annotations)
	ac := rec.Container("main")
	if ac == nil || ac.WrittenMemory == nil || ac.WrittenMemory.Value() != wantMiB<<20 {
		t.Fatalf("written %+v, want %d MiB", ac, wantMiB)
	}
	return resp, got, ac
}
