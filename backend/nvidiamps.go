package backend

import (
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/sharingplan"
)

// newNVIDIAMPS returns the nvidia-mps backend: pods placed on one replica of the
// MPS-shared GPUs of their GPUSharingPolicy's pool (NVIDIA device plugin sharing.mps,
// devicePluginBackend). The device plugin's MPS daemon sets every client's limits to an
// equal 1/N itself, so nothing per client is written into the pod (no CUDA_MPS_* env: a
// client can only tighten the daemon's defaults, which the mps backend does on its own
// MPS setups). Read returns the share the daemon enforces: pinned memory GPU memory / N
// (whole MiB down) and active threads 100 / N percent (down), as compute in thousandths.
func newNVIDIAMPS(c Config) Codec {
	return &devicePluginBackend{cfg: c, typ: gpufracv1.BackendNVIDIAMPS,
		shareCompute: func(n int) int64 { return int64(sharingplan.ReplicaThreadPercentage(n)) * 10 }}
}
