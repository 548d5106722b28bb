package backend

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// LabelGPUMemory is NVIDIA GPU feature discovery's node label: the memory of one of the
// node's GPUs, MiB (23034 on an L4, 81559 on an H100 80GB HBM3, 143771 on an H200).
const LabelGPUMemory = "nvidia.com/gpu.memory"

// PinnedGPUMemory returns the memory, bytes, of the smallest GPU that pod's scheduling
// constraints let it run on, read from LabelGPUMemory: the larger of spec.nodeSelector's
// value and the bound of the required node affinity, the smallest over its terms (ORed)
// of each term's largest lower bound (In: its smallest value; Gt: the value plus 1 MiB).
// It returns 0 when the constraints leave the size open: no nodeSelector value and a term
// (or no affinity) without such a requirement, or a value that is not a positive integer.
// Preferred affinity binds nothing and is not read.
func PinnedGPUMemory(pod *corev1.Pod) int64 {
	var sel int64
	if v, ok := pod.Spec.NodeSelector[LabelGPUMemory]; ok {
		sel = parseMiB(v)
	}
	return max(sel, affinityGPUMemory(pod.Spec.Affinity)) * MiB
}

// affinityGPUMemory is the smallest GPU memory, MiB, a required node affinity allows
// (PinnedGPUMemory); 0 when it leaves it open.
func affinityGPUMemory(a *corev1.Affinity) int64 {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return 0
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	var least int64
	for _, term := range terms {
		var bound int64 // the term's nodes have at least this much, MiB
		for _, e := range term.MatchExpressions {
			if e.Key != LabelGPUMemory {
				continue
			}
			var b int64
			switch e.Operator {
			case corev1.NodeSelectorOpIn:
				for _, v := range e.Values {
					m := parseMiB(v)
					if m <= 0 {
						b = 0
						break
					}
					if b == 0 || m < b {
						b = m
					}
				}
			case corev1.NodeSelectorOpGt:
				if len(e.Values) == 1 {
					if m := parseMiB(e.Values[0]); m > 0 {
						b = m + 1
					}
				}
			}
			bound = max(bound, b)
		}
		if bound == 0 {
			return 0 // this term lets the pod onto a GPU of any size
		}
		if least == 0 || bound < least {
			least = bound
		}
	}
	return least
}

// parseMiB parses a label value of whole MiB; 0 when it is not a positive integer.
func parseMiB(s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > 1<<30 { // 1 PiB: not a GPU
		return 0
	}
	return v
}

// ForPod returns c with GPUMemoryBytes set to the memory of the GPUs pod may run on
// where its scheduling constraints name it (PinnedGPUMemory), else c. The KAI backend
// sizes a pod's gpu-fraction, and its whole-GPU limit, by it: a fraction of the
// --gpu-memory a pod pinned to a smaller GPU lands on would give it less memory than its
// target (an L4's 23034 MiB times a share of 80Gi), and one pinned to a larger GPU would
// take more than it needs. A pod whose constraints leave the size open gets c's, which
// must then be the smallest GPU the pod may land on (docs/install.md, gpuMemory).
func (c Config) ForPod(pod *corev1.Pod) Config {
	if m := PinnedGPUMemory(pod); m > 0 && m > max(c.KAI.ReservedMemoryBytes, 0) {
		c.GPUMemoryBytes = m
	}
	return c
}
