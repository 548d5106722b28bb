package metrics

import "time"

// StaleMinWindow is the shortest window over which a flat memory series with zero
// activity is judged stale on its own: 15 minutes (a pause between two requests is
// shorter). A shorter window (the running interval's first minutes) is stale only where
// it repeats the value last judged stale.
const StaleMinWindow = 15 * time.Minute

// StaleMemory is the stale-series rule for memory samples, with the value last judged
// stale per container: a value left behind by a process that exited (HAMi's
// hami_vgpu_memory_used_bytes stays at the last value while its utilisation reads 0) is
// used neither as a peak nor as a lower bound. The recommender applies it to the memory
// reads of sources whose memory may go stale (MemoryMayGoStale; recommender/load.go
// dropStale) and the what-if simulator to the same windows (simulate), so both keep the
// same samples. The zero value is not usable: use make.
type StaleMemory map[ContainerID]float64

// Judge reports whether the memory sample value (bytes) of container id, the peak of a
// window of the given length, is stale. flat: the series stayed flat over the window
// (FlatQuery: standard deviation 0); computeN: how many compute samples of the container
// lie inside the window (their own window included); busy: whether any of them is above 0.
// A sample is stale when it is flat, above 0 and not busy, and either the window is at
// least StaleMinWindow with computeN > 0, or it is shorter and repeats the value last
// judged stale. A sample that is not flat, not above 0 or busy forgets the container's
// stale value. Judge records the value of a stale sample.
func (s StaleMemory) Judge(id ContainerID, window time.Duration, value float64, flat bool, computeN int, busy bool) bool {
	switch {
	case !flat || value <= 0 || busy:
		delete(s, id)
	case window >= StaleMinWindow && computeN > 0, window < StaleMinWindow && s[id] == value:
		s[id] = value
		return true
	}
	return false
}

// ZeroWhileBusy reports whether a memory sample of value bytes (a window's peak) is a
// broken reading: 0 while a compute sample of the same container in the window was above
// 0 (busy). A process that runs kernels holds at least its CUDA context on the GPU
// (300–500 MiB), so a peak of nothing beside activity is memory the exporter failed to
// see (per-process attribution lost: HAMi-core not injected, the agent unable to read
// the process's PID namespace), not an idle container: used as a sample it would size
// the container at the minimum and shrink it. Only for sources whose memory is read as
// the GPU frees it (!MemoryMayGoStale: DCGM's framebuffer, the same device as its
// activity; the agent's per-process memory and activity); an accounting gauge (HAMi's,
// KAI's) is read per container beside an activity that may be the device's. The
// recommender (recommender/load.go dropStale) and the what-if simulator apply it to the
// same windows.
func ZeroWhileBusy(value float64, busy bool) bool { return value == 0 && busy }

// MemoryMayGoStale reports whether a memory field of src keeps its last value after the
// process exited (Field.KeepsLastValue): only such a source's flat, idle memory is judged
// by StaleMemory.
func MemoryMayGoStale(src Source) bool {
	for _, f := range src.Fields(SignalMemory) {
		if f.KeepsLastValue {
			return true
		}
	}
	return false
}
