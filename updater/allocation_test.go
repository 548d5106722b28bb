package updater

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
)

func TestReadAllocation(t *testing.T) {
	cfg := backend.Config{}.WithDefaults()
	mib := int64(1 << 20)
	container := func(limits corev1.ResourceList, env ...corev1.EnvVar) corev1.Container {
		return corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits}, Env: env}
	}
	gpu := limits("nvidia.com/gpu", "1")
	for _, tc := range []struct {
		name     string
		backend  gpufracv1.BackendType
		ann      map[string]string
		c        corev1.Container
		overhead int64
		mem, cpu int64
		src      AllocationSource
		absent   bool
	}{
		{name: "applied record wins", backend: gpufracv1.BackendHAMi,
			ann: map[string]string{gpufracv1.AnnotationApplied: `{"backend":"hami","autoscaler":"a","recommendationGeneration":1,"recommendationResourceVersion":"1","confidencePercent":90,"containers":[{"name":"main","memory":"3Gi","compute":"250m","writtenMemory":"3328Mi","writtenCompute":"250m"}]}`},
			c:   container(limits("nvidia.com/gpu", "1", "nvidia.com/gpumem", "9999")),
			mem: 3 << 30, cpu: 250, src: SourceAppliedRecord},
		{name: "hami limits minus overhead", backend: gpufracv1.BackendHAMi, overhead: 256 * mib,
			c:   container(limits("nvidia.com/gpu", "1", "nvidia.com/gpumem", "3328", "nvidia.com/gpucores", "25")),
			mem: 3 << 30, cpu: 250, src: SourceBackendFields},
		{name: "mps env", backend: gpufracv1.BackendMPS,
			c:   container(gpu, corev1.EnvVar{Name: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", Value: "0=2048M"}, corev1.EnvVar{Name: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", Value: "30"}),
			mem: 2 << 30, cpu: 300, src: SourceBackendFields},
		{name: "annotations backend per-container keys", backend: gpufracv1.BackendAnnotations,
			ann: map[string]string{"gpufrac.io/container.main.gpu-memory": "1536Mi", "gpufrac.io/container.main.gpu-compute": "150m"},
			c:   container(gpu), mem: 1536 * mib, cpu: 150, src: SourceBackendFields},
		{name: "kai gpu-memory annotation, no compute", backend: gpufracv1.BackendKAI,
			ann: map[string]string{"gpu-memory": "4096"}, c: container(nil), mem: 4 << 30, cpu: -1, src: SourceBackendFields},
		{name: "kai gpu-fraction annotation", backend: gpufracv1.BackendKAI,
			ann: map[string]string{"gpu-fraction": "0.25"}, c: container(nil), mem: 20 << 30, cpu: -1, src: SourceBackendFields},
		{name: "kai-nvfractions request", backend: gpufracv1.BackendKAINVFractions,
			ann: map[string]string{"nvidia.com/container.main.gpu-memory.request": "5Gi"}, c: container(nil), mem: 5 << 30, cpu: -1, src: SourceBackendFields},
		{name: "no fraction: whole GPU", backend: gpufracv1.BackendHAMi, c: container(gpu), mem: 80 << 30, cpu: 1000, src: SourceWholeGPU},
		{name: "no fraction, KAI: whole GPU memory only", backend: gpufracv1.BackendKAI, c: container(gpu), mem: 80 << 30, cpu: -1, src: SourceWholeGPU},
		{name: "two whole GPUs: left alone", backend: gpufracv1.BackendHAMi, c: container(limits("nvidia.com/gpu", "2")), absent: true},
		{name: "no GPU", backend: gpufracv1.BackendHAMi, c: container(nil), absent: true},
		{name: "invalid record: backend fields", backend: gpufracv1.BackendMPS, ann: map[string]string{gpufracv1.AnnotationApplied: "{"},
			c: container(gpu, corev1.EnvVar{Name: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", Value: "0=1024M"}), mem: 1 << 30, cpu: -1, src: SourceBackendFields},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}, Spec: corev1.PodSpec{Containers: []corev1.Container{tc.c}}}
			a := ReadAllocation(pod, tc.backend, cfg, tc.overhead)
			c, ok := a.Containers["main"]
			if tc.absent {
				if ok {
					t.Fatalf("container read as %+v, want absent", c)
				}
				return
			}
			if !ok || c.Memory != tc.mem || c.Compute != tc.cpu || c.Source != tc.src {
				t.Fatalf("got %+v (ok %v), want memory %d compute %d source %s", c, ok, tc.mem, tc.cpu, tc.src)
			}
		})
	}
}

// TestReadAllocationKAIReserved: a gpu-fraction reads back as a share of the usable memory
// (--gpu-memory less --kai-reserved-memory), the same denominator the webhook divides by,
// so the 0.41 written for 5980 MiB on a 15 GiB GPU with 512 MiB reserved reads back as at
// least 5980 MiB, where the total would make it 6297 MiB.
func TestReadAllocationKAIReserved(t *testing.T) {
	mib := int64(1 << 20)
	for _, reserved := range []int64{0, 512 * mib} {
		cfg := backend.Config{GPUMemoryBytes: 15 << 30, KAI: backend.KAIConfig{Mode: backend.KAIModeFraction, ReservedMemoryBytes: reserved}}.WithDefaults()
		// What the webhook writes for 5980 MiB.
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: limits("nvidia.com/gpu", "1")}}}}}
		tg := &backend.Target{Container: "main", Index: 0, HasMemory: true, MemoryBytes: 5980 * mib, WrittenComputeMilli: -1}
		if _, err := backend.New(cfg)[gpufracv1.BackendKAI].Apply(pod, []*backend.Target{tg}); err != nil {
			t.Fatal(err)
		}
		got := ReadAllocation(pod, gpufracv1.BackendKAI, cfg, 0).Containers["main"].Memory
		f, _ := strconv.ParseFloat(pod.Annotations["gpu-fraction"], 64)
		want := int64(f * float64(15<<30-reserved))
		if got != want {
			t.Errorf("reserved %d MiB: read %d bytes, want %s × usable = %d", reserved/mib, got, pod.Annotations["gpu-fraction"], want)
		}
		if got < 5980*mib-mib {
			t.Errorf("reserved %d MiB: read %d MiB, below the 5980 MiB written", reserved/mib, got/mib)
		}
		if reserved > 0 && got > 5980*mib*103/100 {
			t.Errorf("reserved %d MiB: read %d MiB, more than 3%% above what was written (total memory as denominator?)", reserved/mib, got/mib)
		}
	}
}

// A pod without an applied record (created before gpufrac, or by another writer) is
// read in its native sidecars as in its regular containers: backend fields, else a
// whole GPU. An init container that runs to completion is never read, whatever it asks.
func TestReadAllocationNativeSidecar(t *testing.T) {
	cfg := backend.Config{}.WithDefaults()
	always := corev1.ContainerRestartPolicyAlways
	gpu := limits("nvidia.com/gpu", "1")
	hami := limits("nvidia.com/gpu", "1", "nvidia.com/gpumem", "2048", "nvidia.com/gpucores", "30")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "warmup", Resources: corev1.ResourceRequirements{Limits: gpu}},
			{Name: "fractioned", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Limits: hami}},
			{Name: "whole", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Limits: gpu}},
		},
		Containers: []corev1.Container{{Name: "app"}},
	}}
	a := ReadAllocation(pod, gpufracv1.BackendHAMi, cfg, 0)
	want := map[string]Alloc{
		"fractioned": {Memory: 2048 << 20, Compute: 300, Source: SourceBackendFields},
		"whole":      {Memory: cfg.GPUMemoryBytes, Compute: 1000, Source: SourceWholeGPU},
	}
	if len(a.Containers) != len(want) {
		t.Errorf("read %+v, want %+v", a.Containers, want)
	}
	for name, w := range want {
		if got := a.Containers[name]; got != w {
			t.Errorf("%s: %+v, want %+v", name, got, w)
		}
	}
}

// A pod created before gpufrac whose native sidecar holds a whole GPU is out of date
// with the sidecar's recommendation (shrink); its GPU init container, recommended 6Gi,
// is never compared, so it neither grows nor holds the pod.
func TestSidecarComparedInitContainerNot(t *testing.T) {
	cfg := backend.Config{}.WithDefaults()
	always := corev1.ContainerRestartPolicyAlways
	gpu := limits("nvidia.com/gpu", "1")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "warmup", Resources: corev1.ResourceRequirements{Limits: gpu}},
			{Name: "gpu-server", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Limits: gpu}},
		},
		Containers: []corev1.Container{{Name: "app"}},
	}}
	mem := func(s string) gpufracv1.GPUResources { return gpufracv1.GPUResources{Memory: q(s)} }
	gfr := &gpufracv1.GPUFractionRecommendation{Status: gpufracv1.GPUFractionRecommendationStatus{ContainerRecommendations: []gpufracv1.ContainerRecommendation{
		{ContainerName: "gpu-server", ContainerType: gpufracv1.ContainerTypeSidecar, Target: mem("2Gi"), LowerBound: mem("1Gi"), UpperBound: mem("4Gi")},
		{ContainerName: "warmup", ContainerType: gpufracv1.ContainerTypeInit, Target: mem("200Gi"), LowerBound: mem("200Gi"), UpperBound: mem("200Gi")},
	}}}
	n := Evaluate(ReadAllocation(pod, gpufracv1.BackendHAMi, cfg, 0), contract.TargetsOf(&gpufracv1.GPUFractionAutoscaler{}, gfr), PodFacts{Age: time.Hour}, Rules{Threshold: 0.1, NearLimit: 0.9})
	if !n.Shrink || n.Grow || !strings.Contains(n.Reason(), "gpu-server: memory 80Gi above upper bound 4Gi") || strings.Contains(n.Reason(), "warmup") {
		t.Errorf("need %+v (%s), want the sidecar shrunk and the init container left alone", n, n.Reason())
	}
}

// TestNVFractionsRequestBelowTarget: a kai-nvfractions pod admitted with
// --nvfractions-request=observed-peak carries a 3Gi request for a 4Gi target. With its
// applied record the updater reads the target and finds nothing to do while the peak
// stays at 3Gi, grows it urgently once the peak reaches the near-limit share of the
// target, and (without the record) reads the request, where the peak is a used-up
// allocation: an urgent growth.
func TestNVFractionsRequestBelowTarget(t *testing.T) {
	cfg := backend.Config{NVFractions: backend.NVFractionsConfig{Request: backend.NVFractionsRequestObservedPeak}}.WithDefaults()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		gpufracv1.AnnotationApplied:                    `{"backend":"kai-nvfractions","autoscaler":"a","recommendationGeneration":1,"recommendationResourceVersion":"1","confidencePercent":90,"containers":[{"name":"main","memory":"4Gi","writtenMemory":"3Gi"}]}`,
		"nvidia.com/container.main.gpu-memory.request": "3Gi",
		"nvidia.com/container.main.gpu-memory.limit":   "6Gi",
	}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
	target := func(peak int64) map[string]contract.Target {
		return map[string]contract.Target{"main": {Container: "main", Memory: 4 << 30, LowerMemory: 3 << 30, UpperMemory: 6 << 30,
			Compute: -1, LowerCompute: -1, UpperCompute: -1, PeakMemory: peak, ControlsMemory: true}}
	}
	rules := Rules{Threshold: 0.1, MinPodAge: time.Hour, NearLimit: 0.9, UrgentGrowth: true}
	facts := PodFacts{Age: 2 * time.Hour}

	alloc := ReadAllocation(pod, gpufracv1.BackendKAINVFractions, cfg, 0)
	if a := alloc.Containers["main"]; a.Memory != 4<<30 || a.Compute != -1 || a.Source != SourceAppliedRecord {
		t.Fatalf("allocation %+v, want the record's 4Gi target and no compute", a)
	}
	if n := Evaluate(alloc, target(3<<30), facts, rules); n.Needed() {
		t.Errorf("peak 3Gi under a 4Gi target: %+v, want nothing", n)
	}
	if n := Evaluate(alloc, target(3900<<20), facts, rules); n.Needed() {
		t.Errorf("peak 3900Mi, target unchanged: %+v, want nothing (the target is already what the pod has)", n)
	}
	grown := target(3900 << 20)
	m := grown["main"]
	m.Memory = 4700 << 20
	grown["main"] = m
	if n := Evaluate(alloc, grown, facts, rules); !n.Grow || !n.Urgent {
		t.Errorf("peak 3900Mi ≥ 90 %% of the 4Gi target, target 4700Mi: %+v, want an urgent growth", n)
	}

	delete(pod.Annotations, gpufracv1.AnnotationApplied)
	alloc = ReadAllocation(pod, gpufracv1.BackendKAINVFractions, cfg, 0)
	if a := alloc.Containers["main"]; a.Memory != 3<<30 || a.Source != SourceBackendFields {
		t.Fatalf("allocation without a record %+v, want the 3Gi request", a)
	}
	if n := Evaluate(alloc, target(3<<30), facts, rules); !n.Grow || !n.Urgent {
		t.Errorf("no record, peak at the request: %+v, want an urgent growth to the target", n)
	}
}
