package simulate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/trace"
)

// reqLimitDecision is a confident decision for a 4 GiB target with an observed peak of
// 3.5 GiB and an upper bound of 6 GiB.
func reqLimitDecision() decision {
	return decision{ok: true, full: true, want: packing.Alloc{MemoryBytes: 4 * gib},
		target: contract.Target{Memory: 4 * gib, UpperMemory: 6 * gib, PeakMemory: 7 * gib / 2, RequestPeakMemory: 7 * gib / 2, Compute: -1, LowerCompute: -1, UpperCompute: -1, LowerMemory: -1, ControlsMemory: true}}
}

// TestRequestLimitEvaluation: on kai-nvfractions with observed-peak requests, two pods
// of 4 GiB targets are packed by their 3.5 GiB requests onto one 7.5 GiB GPU (by their
// targets they need two). Pod a bursts to 5 GiB (over its request, within its 6 GiB
// limit: no pod overrun) while b holds 3 GiB: 8 GiB on the GPU is a GPU overrun for
// both tenants, and only a, above its request, gets an out-of-memory exit. Then b goes
// to 6.5 GiB, over its limit: one pod overrun, and both exits. On annotations with
// observed-peak memory requests the pods are packed by the same requests onto one GPU,
// but their limit is the 4 GiB target: a is over it in both burst minutes and b in the
// last. With the default backend (no memory request) the same decisions are hard limits
// and take two GPUs.
func TestRequestLimitEvaluation(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{
		pod("a", 0, []float64{3, 3, 5, 5}, repeat(0.1, 4)),
		pod("b", 0, []float64{3, 3, 3, 6.5}, repeat(0.1, 4)),
	}}
	capacity := int64(7.5 * float64(gib))
	for _, tc := range []struct {
		name                           string
		opts                           Options
		gpus                           int
		podOver, gpuOver, gpuOverPod   float64
		oomA, oomB                     int
		wantReq, wantLimit, wantRecord int64
	}{
		{"kai-nvfractions observed-peak", Options{Backend: gpufracv1.BackendKAINVFractions, NVFractions: backend.NVFractionsConfig{Request: backend.NVFractionsRequestObservedPeak}},
			1, 1, 2, 4, 3, 3, 7 * gib / 2, 6 * gib, 4 * gib},
		{"kai-nvfractions target", Options{Backend: gpufracv1.BackendKAINVFractions},
			2, 1, 0, 0, -1, 3, 4 * gib, 6 * gib, 4 * gib},
		{"annotations observed-peak (the default)", Options{},
			1, 3, 2, 4, 3, 3, 7 * gib / 2, 4 * gib, 4 * gib},
		{"annotations without a memory request: hard limit", Options{Annotations: backend.AnnotationsConfig{MemoryRequest: backend.AnnotationsMemoryRequestNone}},
			2, 3, 0, 0, 3, 3, 4 * gib, 4 * gib, 4 * gib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.GPUMemoryBytes, o.Policies = capacity, []string{PolicyGPUFrac}
			rp, err := newReplay(&tr, o)
			if err != nil {
				t.Fatal(err)
			}
			g := rp.written(reqLimitDecision())
			if g.alloc.MemoryBytes != tc.wantReq || g.limit != tc.wantLimit || g.record != tc.wantRecord || g.alloc.ComputeMilli != 0 || g.compute != -1 {
				t.Fatalf("written %+v, want request %d limit %d record %d", g, tc.wantReq, tc.wantLimit, tc.wantRecord)
			}
			ps := rp.states[0]
			rp.turnover(0)
			for _, i := range rp.alive {
				rp.place(0, i, 0, g, false, false)
			}
			for k := 0; k < rp.tl.steps; k++ {
				evaluate(ps, rp.tl, rp.d, 0, k, rp.capacity)
			}
			r := rp.policyResult(0, ps, 0)
			want := GiB(capacity) + " GPUs"
			if o.Backend != "" {
				req := o.NVFractions.Request
				if req == "" {
					req = backend.NVFractionsRequestTarget
				}
				want += ", kai-nvfractions (request " + req + ", limit upper-bound)"
			} else if o.Annotations.MemoryRequest == backend.AnnotationsMemoryRequestNone {
				want += ", no memory request (placed by the limit)"
			}
			if h := rp.result(&tr).Heading(); h != want {
				t.Errorf("heading %q, want %q", h, want)
			}
			if ps.pk.Peak() != tc.gpus || r.PodLimitOverrunMinutes != tc.podOver || r.GPUOverrunMinutes != tc.gpuOver || r.GPUOverrunPodMinutes != tc.gpuOverPod {
				t.Errorf("GPUs %d, pod overrun %v, GPU overrun %v (%v pod-minutes); want %d, %v, %v (%v)",
					ps.pk.Peak(), r.PodLimitOverrunMinutes, r.GPUOverrunMinutes, r.GPUOverrunPodMinutes, tc.gpus, tc.podOver, tc.gpuOver, tc.gpuOverPod)
			}
			if ps.oomAt[0] != tc.oomA || ps.oomAt[1] != tc.oomB {
				t.Errorf("last out-of-memory exits at steps %d, %d; want %d, %d", ps.oomAt[0], ps.oomAt[1], tc.oomA, tc.oomB)
			}
		})
	}
}

// TestWrittenIsWhatTheBackendWrites: the grant a simulated pod gets on kai-nvfractions
// is what the product's backend writes into a pod for the same target, upper bound and
// observed peak (request and limit annotations, read back as the scheduler reads them),
// for both request sources and a target too large for a fraction (left a whole GPU);
// likewise on the default annotations backend (TestAnnotationsWrittenIsWhatTheBackendWrites).
func TestWrittenIsWhatTheBackendWrites(t *testing.T) {
	capacity := 80 * gib
	for _, req := range []string{backend.NVFractionsRequestTarget, backend.NVFractionsRequestObservedPeak} {
		for _, dec := range []decision{reqLimitDecision(), func() decision {
			d := reqLimitDecision()
			d.want.MemoryBytes, d.target.Memory, d.target.UpperMemory = 41*gib+12345, 41*gib+12345, 100*gib
			d.target.PeakMemory, d.target.RequestPeakMemory = 30*gib+7, 30*gib+7
			return d
		}(), func() decision {
			d := reqLimitDecision()
			d.want.MemoryBytes, d.target.Memory = capacity, 90*gib
			return d
		}()} {
			nv := backend.NVFractionsConfig{Request: req}
			tr := trace.Trace{Pods: []trace.Pod{pod("a", 0, []float64{1}, []float64{0})}}
			rp, err := newReplay(&tr, Options{GPUMemoryBytes: capacity, Policies: []string{PolicyGPUFrac}, Backend: gpufracv1.BackendKAINVFractions, NVFractions: nv})
			if err != nil {
				t.Fatal(err)
			}
			got := rp.written(dec)

			cfg := backend.Config{GPUMemoryBytes: capacity, NVFractions: nv}.WithDefaults()
			codec := backend.New(cfg)[gpufracv1.BackendKAINVFractions]
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
			bt := &backend.Target{Container: "main", HasMemory: true, MemoryBytes: dec.target.Memory, UpperMemoryBytes: dec.target.UpperMemory,
				PeakMemoryBytes: dec.target.RequestPeakMemory, WrittenComputeMilli: -1}
			if _, err := codec.Apply(p, []*backend.Target{bt}); err != nil {
				// The webhook leaves the pod's whole GPU.
				if got != rp.coldStart() {
					t.Errorf("%s, target %d: backend refuses (%v), simulator grants %+v", req, dec.target.Memory, err, got)
				}
				continue
			}
			wantReq := resource.MustParse(p.Annotations["nvidia.com/container.main.gpu-memory.request"])
			wantLimit := resource.MustParse(p.Annotations["nvidia.com/container.main.gpu-memory.limit"])
			if got.alloc.MemoryBytes != wantReq.Value() || got.limit != wantLimit.Value() || got.record != dec.target.Memory {
				t.Errorf("%s, target %d: simulator request %d limit %d record %d; backend wrote %s / %s",
					req, dec.target.Memory, got.alloc.MemoryBytes, got.limit, got.record, wantReq.String(), wantLimit.String())
			}
		}
	}
}

// TestAnnotationsWrittenIsWhatTheBackendWrites: on the default backend (annotations) a
// simulated pod is packed by the gpufrac.io/container.<c>.gpu-memory-request the
// backend writes for the same target and observed peak, and out of memory above its
// .gpu-memory (the target, whole MiB), for a peak below the target, a peak above it and
// a young workload's margin; with --annotation-memory-request none, by the limit.
func TestAnnotationsWrittenIsWhatTheBackendWrites(t *testing.T) {
	capacity := 80 * gib
	below := reqLimitDecision()
	above := reqLimitDecision()
	above.target.PeakMemory, above.target.RequestPeakMemory = 5*gib, 5*gib
	young := reqLimitDecision()
	young.want.MemoryBytes, young.target.Memory = 41*gib+12345, 41*gib+12345
	young.target.PeakMemory, young.target.RequestPeakMemory = 30*gib+7, 36*gib+9
	for _, mode := range []string{backend.AnnotationsMemoryRequestObservedPeak, backend.AnnotationsMemoryRequestNone} {
		for _, dec := range []decision{below, above, young} {
			ac := backend.AnnotationsConfig{MemoryRequest: mode}
			tr := trace.Trace{Pods: []trace.Pod{pod("a", 0, []float64{1}, []float64{0})}}
			rp, err := newReplay(&tr, Options{GPUMemoryBytes: capacity, Policies: []string{PolicyGPUFrac}, Annotations: ac})
			if err != nil {
				t.Fatal(err)
			}
			got := rp.written(dec)

			codec := backend.New(backend.Config{GPUMemoryBytes: capacity, Annotations: ac})[gpufracv1.BackendAnnotations]
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
			bt := &backend.Target{Container: "main", HasMemory: true, MemoryBytes: dec.target.Memory,
				PeakMemoryBytes: dec.target.RequestPeakMemory, WrittenComputeMilli: -1}
			if _, err := codec.Apply(p, []*backend.Target{bt}); err != nil {
				t.Fatal(err)
			}
			limit := resource.MustParse(p.Annotations[gpufracv1.AnnotationContainerPrefix+"main"+gpufracv1.AnnotationContainerMemorySuffix])
			req := limit
			if mode != backend.AnnotationsMemoryRequestNone {
				req = resource.MustParse(p.Annotations[gpufracv1.AnnotationContainerPrefix+"main"+gpufracv1.AnnotationContainerMemoryRequestSuffix])
			}
			if got.alloc.MemoryBytes != req.Value() || got.limit != limit.Value() || got.record != dec.target.Memory {
				t.Errorf("%s, target %d peak %d: simulator request %d limit %d record %d; backend wrote %s / %s",
					mode, dec.target.Memory, dec.target.RequestPeakMemory, got.alloc.MemoryBytes, got.limit, got.record, req.String(), limit.String())
			}
		}
	}
}
