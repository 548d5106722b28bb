package backend

import (
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// GPU feature discovery's nvidia.com/gpu.memory of some GPUs, MiB.
const (
	l4MiB   = 23034
	a100MiB = 40960
	h100MiB = 81559
	h200MiB = 143771
)

func withAffinity(pod *corev1.Pod, terms ...corev1.NodeSelectorTerm) *corev1.Pod {
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	return pod
}

func term(exprs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

func req(key string, op corev1.NodeSelectorOperator, values ...int64) corev1.NodeSelectorRequirement {
	r := corev1.NodeSelectorRequirement{Key: key, Operator: op}
	for _, v := range values {
		r.Values = append(r.Values, strconv.FormatInt(v, 10))
	}
	return r
}

// PinnedGPUMemory is the smallest GPU the pod's binding constraints allow, and 0
// wherever one path (a nodeSelector term, or no constraint at all) leaves the size open.
func TestPinnedGPUMemory(t *testing.T) {
	sel := func(v string) *corev1.Pod {
		p := podOf(gpuContainer("main", 1))
		p.Spec.NodeSelector = map[string]string{LabelGPUMemory: v, "pool": "gpu"}
		return p
	}
	aff := func(terms ...corev1.NodeSelectorTerm) *corev1.Pod {
		return withAffinity(podOf(gpuContainer("main", 1)), terms...)
	}
	in := func(v ...int64) corev1.NodeSelectorRequirement {
		return req(LabelGPUMemory, corev1.NodeSelectorOpIn, v...)
	}
	preferred := podOf(gpuContainer("main", 1))
	preferred.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: term(in(l4MiB))}}}}
	both := sel(strconv.Itoa(h100MiB))
	withAffinity(both, term(in(a100MiB, h100MiB)))
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want int64 // MiB
	}{
		{"no constraint", podOf(gpuContainer("main", 1)), 0},
		{"nodeSelector L4", sel(strconv.Itoa(l4MiB)), l4MiB},
		{"nodeSelector H200", sel(strconv.Itoa(h200MiB)), h200MiB},
		{"nodeSelector not a number", sel("80GB"), 0},
		{"nodeSelector zero", sel("0"), 0},
		{"In one size", aff(term(in(a100MiB))), a100MiB},
		{"In several sizes: the smallest", aff(term(in(h200MiB, l4MiB, h100MiB))), l4MiB},
		{"In with a value not a number", aff(term(in(h100MiB), corev1.NodeSelectorRequirement{Key: LabelGPUMemory, Operator: corev1.NodeSelectorOpIn, Values: []string{"81559", "x"}})), h100MiB},
		{"terms ORed: the smallest", aff(term(in(h200MiB)), term(in(a100MiB))), a100MiB},
		{"a term without the label: open", aff(term(in(h200MiB)), term(req("pool", corev1.NodeSelectorOpIn))), 0},
		{"Gt", aff(term(req(LabelGPUMemory, corev1.NodeSelectorOpGt, a100MiB))), a100MiB + 1},
		{"In and Gt in one term: the larger bound", aff(term(in(l4MiB, h100MiB), req(LabelGPUMemory, corev1.NodeSelectorOpGt, a100MiB))), a100MiB + 1},
		{"Lt alone: open", aff(term(req(LabelGPUMemory, corev1.NodeSelectorOpLt, a100MiB))), 0},
		{"NotIn alone: open", aff(term(req(LabelGPUMemory, corev1.NodeSelectorOpNotIn, l4MiB))), 0},
		{"Exists: open", aff(term(req(LabelGPUMemory, corev1.NodeSelectorOpExists))), 0},
		{"preferred only: open", preferred, 0},
		{"nodeSelector and affinity: the larger", both, h100MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PinnedGPUMemory(tc.pod); got != tc.want*MiB {
				t.Errorf("PinnedGPUMemory = %d MiB, want %d MiB", got/MiB, tc.want)
			}
		})
	}
}

// TestKAIFractionOfThePinnedGPU: a KAI gpu-fraction is a share of the GPU the pod lands
// on. A pod pinned by nodeSelector to GPUs of another size than --gpu-memory gets at
// least its target on them (an L4 pod's 10 GiB target was 0.13 of 80Gi: 3 GiB of the
// L4), never a share of one larger than that GPU, and a target its GPU cannot hold as a
// fraction is a whole GPU (unsafe). Unpinned pods keep --gpu-memory. Over GPU sizes,
// flag sizes, reserves and targets, in both modes, Read returns what Apply recorded.
func TestKAIFractionOfThePinnedGPU(t *testing.T) {
	for _, flagMiB := range []int64{l4MiB, h100MiB, h200MiB} {
		for _, pinnedMiB := range []int64{0, l4MiB, a100MiB, h100MiB, h200MiB} {
			for _, reserved := range []int64{0, 512 * MiB} {
				for _, mode := range []string{KAIModeFraction, KAIModeMemory} {
					for _, memMiB := range []int64{1000, 10 << 10, 22 << 10, 30 << 10, 70 << 10, 100 << 10} {
						gpuMiB := flagMiB
						if pinnedMiB > 0 {
							gpuMiB = pinnedMiB
						}
						name := strconv.FormatInt(flagMiB, 10) + "/" + strconv.FormatInt(pinnedMiB, 10) + "/" + strconv.FormatInt(reserved/MiB, 10) + "/" + mode + "/" + strconv.FormatInt(memMiB, 10)
						t.Run(name, func(t *testing.T) {
							if memMiB > flagMiB {
								t.Skip("above --gpu-memory: the webhook admits such a pod unchanged before the backend")
							}
							cfg := Config{GPUMemoryBytes: flagMiB * MiB, KAI: KAIConfig{Mode: mode, ReservedMemoryBytes: reserved}}.WithDefaults()
							pod := podOf(gpuContainer("main", 1))
							if pinnedMiB > 0 {
								pod.Spec.NodeSelector = map[string]string{LabelGPUMemory: strconv.FormatInt(pinnedMiB, 10)}
							}
							tg := target("main", 0, memMiB, -1)
							b := backend(t, cfg, gpufracv1.BackendKAI)
							_, err := b.Apply(pod, []*Target{tg})
							usable := gpuMiB*MiB - reserved
							if memMiB*MiB >= usable*99/100+MiB {
								// Near or above the landing GPU's usable memory: at most a whole GPU.
								if err != nil {
									wantUnsafe(t, err, UnsafeWholeGPU)
									return
								}
							} else if err != nil {
								t.Fatalf("Apply: %v", err)
							}
							var got int64 // bytes of the landing GPU the pod gets
							if f, ok := pod.Annotations[cfg.KAI.FractionAnnotation]; ok {
								v, _ := strconv.ParseFloat(f, 64)
								got = int64(v * float64(usable))
							} else {
								v, _ := strconv.ParseInt(pod.Annotations[cfg.KAI.MemoryAnnotation], 10, 64)
								got = v * MiB
							}
							if got < memMiB*MiB {
								t.Errorf("the pod gets %d MiB of its %d MiB GPU, below its target %d MiB", got/MiB, gpuMiB, memMiB)
							}
							if got >= usable {
								t.Errorf("the pod gets %d MiB, a whole GPU of %d MiB usable, as a fraction", got/MiB, usable/MiB)
							}
							if mode == KAIModeFraction && got-memMiB*MiB > usable/100+MiB {
								t.Errorf("the pod gets %d MiB for %d MiB: more than a hundredth of its GPU over", got/MiB, memMiB)
							}
							if r := b.Read(pod)["main"].Memory; r != tg.WrittenMemoryBytes || r < memMiB*MiB {
								t.Errorf("Read %d bytes, recorded %d, target %d MiB", r, tg.WrittenMemoryBytes, memMiB)
							}
						})
					}
				}
			}
		}
	}
}
