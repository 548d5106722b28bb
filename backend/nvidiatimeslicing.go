package backend

import gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"

// newNVIDIATimeSlicing returns the nvidia-timeslicing backend: pods placed on one replica
// of the time-sliced GPUs of their GPUSharingPolicy's pool (NVIDIA device plugin
// sharing.timeSlicing, devicePluginBackend). Time-slicing limits neither memory nor
// compute: the replica's memory share (GPU memory / N) is the budget the planner sized N
// for, recorded as written so the updater compares it; no compute is written or read
// (WritesCompute false).
func newNVIDIATimeSlicing(c Config) Codec {
	return &devicePluginBackend{cfg: c, typ: gpufracv1.BackendNVIDIATimeSlicing,
		shareCompute: func(int) int64 { return -1 }}
}
