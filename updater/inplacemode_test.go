package updater

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestInPlaceSharingModeMoveDropsTheOldKeys: under InPlaceOrRecreate an annotations
// pod whose sharing mode moved (sharingModeMoved) is changed in place, and the keys
// gpufrac wrote for the mode it leaves go with it: a pod holding a compute partition
// while its recommendation now time-slices compute loses gpufrac.io/gpu-compute and its
// per-container key (the cap a workload reads through the downward API) and gets its
// compute request; a time-sliced pod whose recommendation now partitions compute loses
// its compute request keys and gets the partition. Keys gpufrac did not write by the
// record (another container's, a user's own) stay. Before, the patch only added: the
// old cap stayed in the pod while its record said it held none, and the updater took
// the pod as in date.
func TestInPlaceSharingModeMoveDropsTheOldKeys(t *testing.T) {
	const (
		prefix = gpufracv1.AnnotationContainerPrefix + "main"
		cpuKey = prefix + gpufracv1.AnnotationContainerComputeSuffix
		reqKey = prefix + gpufracv1.AnnotationContainerComputeRequestSuffix
		memKey = prefix + gpufracv1.AnnotationContainerMemorySuffix
	)
	for _, tc := range []struct {
		name       string
		mode       gpufracv1.SharingMode
		record     gpufracv1.AppliedContainer
		held, want map[string]string // annotations before; after (value "" = absent)
	}{
		{
			name: "partition, now time-sliced", mode: gpufracv1.SharingModeTimeSlicing,
			record: gpufracv1.AppliedContainer{Name: "main", Memory: q("1Gi"), WrittenMemory: q("1Gi"), Compute: q("700m"), WrittenCompute: q("700m")},
			held: map[string]string{gpufracv1.AnnotationGPUMemory: "1Gi", memKey: "1Gi", gpufracv1.AnnotationGPUCompute: "700m", cpuKey: "700m",
				"gpufrac.io/container.other.gpu-compute": "300m"},
			want: map[string]string{gpufracv1.AnnotationGPUCompute: "", cpuKey: "", reqKey: "120m", gpufracv1.AnnotationGPUComputeRequest: "120m",
				memKey: "1Gi", "gpufrac.io/container.other.gpu-compute": "300m"},
		},
		{
			name: "time-sliced, now partitioned", mode: gpufracv1.SharingModeMPS,
			record: gpufracv1.AppliedContainer{Name: "main", Memory: q("1Gi"), WrittenMemory: q("1Gi"), WrittenComputeRequest: q("60m")},
			held:   map[string]string{gpufracv1.AnnotationGPUMemory: "1Gi", memKey: "1Gi", gpufracv1.AnnotationGPUComputeRequest: "60m", reqKey: "60m"},
			want:   map[string]string{gpufracv1.AnnotationGPUComputeRequest: "", reqKey: "", cpuKey: "250m", gpufracv1.AnnotationGPUCompute: "250m", memKey: "1Gi"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeInPlaceOrRecreate, gpufracv1.BackendAnnotations, 1, 1)
			f.cfg.PersistCycles = 1
			r := &f.gfr.Status.ContainerRecommendations[0]
			r.SharingMode = tc.mode
			if tc.mode == gpufracv1.SharingModeTimeSlicing {
				r.ComputeRequest = q("120m")
			}
			rec := gpufracv1.AppliedRecord{Backend: gpufracv1.BackendAnnotations, Autoscaler: "web", Containers: []gpufracv1.AppliedContainer{tc.record}}
			b, _ := json.Marshal(rec)
			p := f.pods[0]
			p.Annotations = map[string]string{gpufracv1.AnnotationApplied: string(b)}
			for k, v := range tc.held {
				p.Annotations[k] = v
			}
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "other", Image: "x"})
			got := runInPlace(t, f, p, string(b))
			for k, v := range tc.want {
				if got.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q (annotations %v)", k, got.Annotations[k], v, got.Annotations)
				}
			}
			// Changed once: the next cycle finds the pod in date.
			f.run()
			for _, up := range f.status().Updates {
				t.Errorf("after the change in place: %+v", up)
			}
		})
	}
}

// TestInPlaceTotalsCountNoOldKeys: a change in place writes the annotations backend's
// keys afresh, as into a new pod: a container the old record wrote that the
// recommendation no longer names loses its keys, and the pod total holds only what is
// written now (and a user's own keys), never an old key of gpufrac's. Before, the total
// counted the old key as one the pod carried and the key was removed after: total 3Gi
// for a pod whose only memory key said 1Gi.
func TestInPlaceTotalsCountNoOldKeys(t *testing.T) {
	const prefix = gpufracv1.AnnotationContainerPrefix
	f := newFixture(t, gpufracv1.UpdateModeInPlaceOrRecreate, gpufracv1.BackendAnnotations, 1, 1)
	f.cfg.PersistCycles = 1
	r := &f.gfr.Status.ContainerRecommendations[0]
	r.SharingMode, r.ComputeRequest = gpufracv1.SharingModeTimeSlicing, q("120m")
	rec := gpufracv1.AppliedRecord{Backend: gpufracv1.BackendAnnotations, Autoscaler: "web", Containers: []gpufracv1.AppliedContainer{
		{Name: "main", Memory: q("1Gi"), WrittenMemory: q("1Gi"), Compute: q("700m"), WrittenCompute: q("700m")},
		{Name: "side", Memory: q("2Gi"), WrittenMemory: q("2Gi")},
	}}
	b, _ := json.Marshal(rec)
	p := f.pods[0]
	p.Annotations = map[string]string{gpufracv1.AnnotationApplied: string(b),
		gpufracv1.AnnotationGPUMemory: "3Gi", prefix + "main" + gpufracv1.AnnotationContainerMemorySuffix: "1Gi",
		prefix + "side" + gpufracv1.AnnotationContainerMemorySuffix: "2Gi",
		gpufracv1.AnnotationGPUCompute:                              "700m", prefix + "main" + gpufracv1.AnnotationContainerComputeSuffix: "700m"}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side", Image: "x"})
	got := runInPlace(t, f, p, string(b))
	for k, want := range map[string]string{gpufracv1.AnnotationGPUMemory: "1Gi", prefix + "side" + gpufracv1.AnnotationContainerMemorySuffix: "",
		gpufracv1.AnnotationGPUCompute: "", prefix + "main" + gpufracv1.AnnotationContainerComputeSuffix: ""} {
		if got.Annotations[k] != want {
			t.Errorf("annotation %s = %q, want %q (annotations %v)", k, got.Annotations[k], want, got.Annotations)
		}
	}
}

// runInPlace runs one updater cycle of f with the webhook's logic as its in-place writer
// and returns pod p as changed, failing when its applied record is still record.
func runInPlace(t *testing.T, f *fixture, p *corev1.Pod, record string) *corev1.Pod {
	t.Helper()
	u := f.build()
	u.InPlace = &MutatorInPlacer{Mutator: admission.NewMutator(f.c, f.scheme, admission.Config{}), Client: f.c}
	f.run()
	got := &corev1.Pod{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: p.Name}, got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[gpufracv1.AnnotationApplied] == record {
		t.Fatalf("pod not changed in place: status %+v", f.status().Updates)
	}
	return got
}
