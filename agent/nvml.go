package agent

import (
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// NVML call names, the values of the "call" label of gpufrac_agent_nvml_errors_total:
// each is the name of the NVML C function that go-nvml's method of the same name
// calls (versioned symbols such as nvmlDeviceGetComputeRunningProcesses_v3 are
// reported without the suffix).
const (
	CallInit                         = "nvmlInit"
	CallSystemGetDriverVersion       = "nvmlSystemGetDriverVersion"
	CallDeviceGetCount               = "nvmlDeviceGetCount"
	CallDeviceGetHandleByIndex       = "nvmlDeviceGetHandleByIndex"
	CallDeviceGetUUID                = "nvmlDeviceGetUUID"
	CallDeviceGetName                = "nvmlDeviceGetName"
	CallDeviceGetMemoryInfo          = "nvmlDeviceGetMemoryInfo"
	CallDeviceGetMigMode             = "nvmlDeviceGetMigMode"
	CallDeviceGetMaxMigDeviceCount   = "nvmlDeviceGetMaxMigDeviceCount"
	CallDeviceGetMigDeviceHandle     = "nvmlDeviceGetMigDeviceHandleByIndex"
	CallDeviceGetGpuInstanceID       = "nvmlDeviceGetGpuInstanceId"
	CallDeviceGetComputeProcesses    = "nvmlDeviceGetComputeRunningProcesses"
	CallDeviceGetMPSComputeProcesses = "nvmlDeviceGetMPSComputeRunningProcesses"
	CallDeviceGetGraphicsProcesses   = "nvmlDeviceGetGraphicsRunningProcesses"
	CallDeviceGetProcessUtilization  = "nvmlDeviceGetProcessUtilization"
)

// memoryNotAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long long: NVML puts
// it in ProcessInfo.UsedGpuMemory when it cannot tell a process's memory (MIG
// without privileges, Windows WDDM).
const memoryNotAvailable = ^uint64(0)

// DeviceKey identifies a GPU, or one MIG GPU instance of it, the way dcgm-exporter
// labels it.
type DeviceKey struct {
	// UUID is the physical GPU's UUID ("GPU-..."), also for a MIG instance.
	UUID string
	// Index is the physical GPU's NVML index (label "gpu").
	Index int
	// MIG is true for a MIG GPU instance; GPUInstanceID is then its GPU instance ID.
	MIG           bool
	GPUInstanceID int
}

// GPUInstanceLabel is the value of the GPU_I_ID label: the GPU instance ID for a MIG
// instance, "" (that is, no label) for a whole GPU.
func (k DeviceKey) GPUInstanceLabel() string {
	if !k.MIG {
		return ""
	}
	return strconv.Itoa(k.GPUInstanceID)
}

// Device is one GPU or MIG GPU instance as NVML reported it in one cycle.
type Device struct {
	DeviceKey
	// Model is the product name of the physical GPU (nvmlDeviceGetName), e.g.
	// "NVIDIA H100 80GB HBM3".
	Model string
	// Profile is the MIG profile of an instance, e.g. "1g.10gb" (from the MIG
	// device's name); "" for a whole GPU.
	Profile string
	// MemoryTotalBytes and MemoryUsedBytes are nvmlDeviceGetMemoryInfo's total and
	// used framebuffer memory (for a MIG instance, the instance's), bytes. They are
	// valid only when MemoryKnown.
	MemoryTotalBytes, MemoryUsedBytes uint64
	MemoryKnown                       bool
	// UtilizationSupported is false where NVML has no per-process utilisation: MIG
	// instances, and GPUs whose nvmlDeviceGetProcessUtilization returned
	// ERROR_NOT_SUPPORTED.
	UtilizationSupported bool
}

// procSample is one process on one device in one cycle.
type procSample struct {
	dev      int // index into the cycle's devices
	pid      uint32
	mem      uint64 // bytes; valid when memKnown
	memKnown bool
	smSum    float64 // sum of SmUtil percent over this cycle's samples
	smN      int     // number of samples in smSum
	smKnown  bool    // utilisation was read for the device this cycle
}

// devState is what the sampler keeps across cycles for one device.
type devState struct {
	// lastSeen is the newest nvmlDeviceGetProcessUtilization sample timestamp seen
	// (CPU time, µs since the Unix epoch); samples up to it are not read again.
	lastSeen uint64
	// unsupported marks optional calls that returned ERROR_NOT_SUPPORTED; they are
	// not called again on this device.
	noMPS, noGraphics, noUtil bool
}

// reading is the outcome of one pass over NVML.
type reading struct {
	devices []Device
	procs   []procSample
}

// read enumerates the devices and MIG instances and their processes and
// utilisation. It fails only when the device count cannot be read; per-device
// errors drop that device (or call) for this cycle and are counted.
func (s *Sampler) read(now time.Time, r *reading) bool {
	r.devices, r.procs = r.devices[:0], r.procs[:0]
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		s.nvmlError(CallDeviceGetCount, "", ret)
		return false
	}
	for i := 0; i < n; i++ {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			s.nvmlError(CallDeviceGetHandleByIndex, strconv.Itoa(i), ret)
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			s.nvmlError(CallDeviceGetUUID, strconv.Itoa(i), ret)
			continue
		}
		model, ret := d.GetName()
		if ret != nvml.SUCCESS {
			s.nvmlError(CallDeviceGetName, uuid, ret)
		}
		mig := false
		switch cur, _, ret := d.GetMigMode(); ret {
		case nvml.SUCCESS:
			mig = cur == nvml.DEVICE_MIG_ENABLE
		case nvml.ERROR_NOT_SUPPORTED:
		default:
			s.nvmlError(CallDeviceGetMigMode, uuid, ret)
		}
		if mig {
			s.readMIG(d, uuid, i, model, r)
			continue
		}
		dev := Device{DeviceKey: DeviceKey{UUID: uuid, Index: i}, Model: model}
		dev.MemoryTotalBytes, dev.MemoryUsedBytes, dev.MemoryKnown = s.memoryInfo(d, uuid)
		st := s.state(uuid)
		r.devices = append(r.devices, dev)
		di := len(r.devices) - 1
		first := len(r.procs)
		s.readProcesses(d, uuid, st, di, first, r)
		r.devices[di].UtilizationSupported = s.readUtilization(d, uuid, st, now, r.procs[first:])
	}
	return true
}

// readMIG reads every MIG device (compute instance) of a MIG-enabled GPU, merging
// compute instances of one GPU instance into one Device keyed by (UUID, GPU_I_ID).
// Per-process utilisation is not available under MIG and is not read.
func (s *Sampler) readMIG(parent nvml.Device, uuid string, index int, model string, r *reading) {
	slots, ret := parent.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		s.nvmlError(CallDeviceGetMaxMigDeviceCount, uuid, ret)
		return
	}
	firstDev, firstProc := len(r.devices), len(r.procs)
	for j := 0; j < slots; j++ {
		m, ret := parent.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // no MIG device in this slot
		}
		if ret != nvml.SUCCESS {
			s.nvmlError(CallDeviceGetMigDeviceHandle, uuid, ret)
			continue
		}
		gi, ret := m.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			s.nvmlError(CallDeviceGetGpuInstanceID, uuid, ret)
			continue
		}
		key := DeviceKey{UUID: uuid, Index: index, MIG: true, GPUInstanceID: gi}
		di := -1
		for k := firstDev; k < len(r.devices); k++ {
			if r.devices[k].DeviceKey == key {
				di = k
				break
			}
		}
		if di < 0 {
			dev := Device{DeviceKey: key, Model: model}
			if name, ret := m.GetName(); ret == nvml.SUCCESS {
				dev.Profile = migProfile(name)
			}
			dev.MemoryTotalBytes, dev.MemoryUsedBytes, dev.MemoryKnown = s.memoryInfo(m, uuid)
			r.devices = append(r.devices, dev)
			di = len(r.devices) - 1
		}
		s.readProcesses(m, uuid, s.state(uuid+"/"+strconv.Itoa(gi)), di, firstProc, r)
	}
}

// migProfile returns the profile from a MIG device name such as
// "NVIDIA H100 80GB HBM3 MIG 1g.10gb".
func migProfile(name string) string {
	if i := strings.LastIndex(name, "MIG "); i >= 0 {
		return strings.TrimSpace(name[i+len("MIG "):])
	}
	return ""
}

func (s *Sampler) memoryInfo(d nvml.Device, uuid string) (total, used uint64, ok bool) {
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		s.nvmlError(CallDeviceGetMemoryInfo, uuid, ret)
		return 0, 0, false
	}
	return mem.Total, mem.Used, true
}

func (s *Sampler) state(key string) *devState {
	st := s.devs[key]
	if st == nil {
		st = &devState{}
		s.devs[key] = st
	}
	return st
}

// readProcesses appends the compute, MPS-client and graphics processes of d, the
// handle of device di, to r.procs. A PID in several lists (a process with compute and
// graphics contexts, or listed under two compute instances of one GPU instance)
// appears once with the largest memory: NVML reports the process's memory on the
// device in each list. from is the first of r.procs that may be of device di: for
// a MIG instance, the first of its physical GPU, whose compute instances are read
// in slot order with other GPU instances' in between.
func (s *Sampler) readProcesses(d nvml.Device, uuid string, st *devState, di, from int, r *reading) {
	merge := func(list []nvml.ProcessInfo) {
		for _, p := range list {
			known := p.UsedGpuMemory != memoryNotAvailable
			found := false
			for k := from; k < len(r.procs); k++ {
				q := &r.procs[k]
				if q.pid != p.Pid || q.dev != di {
					continue
				}
				found = true
				if known && (!q.memKnown || p.UsedGpuMemory > q.mem) {
					q.mem, q.memKnown = p.UsedGpuMemory, true
				}
				break
			}
			if !found {
				r.procs = append(r.procs, procSample{dev: di, pid: p.Pid, mem: p.UsedGpuMemory, memKnown: known})
			}
		}
	}
	list, ret := d.GetComputeRunningProcesses()
	s.processList(CallDeviceGetComputeProcesses, uuid, ret, nil, list, merge)
	if !st.noMPS {
		list, ret := d.GetMPSComputeRunningProcesses()
		s.processList(CallDeviceGetMPSComputeProcesses, uuid, ret, &st.noMPS, list, merge)
	}
	if !st.noGraphics {
		list, ret := d.GetGraphicsRunningProcesses()
		s.processList(CallDeviceGetGraphicsProcesses, uuid, ret, &st.noGraphics, list, merge)
	}
}

// processList handles one process-list call's result: SUCCESS merges the list;
// ERROR_NOT_FOUND (the device or MIG instance has nothing, or went away) is empty;
// ERROR_NOT_SUPPORTED on an optional call disables it for the device; anything else
// is counted and logged.
func (s *Sampler) processList(call, uuid string, ret nvml.Return, unsupported *bool, list []nvml.ProcessInfo, merge func([]nvml.ProcessInfo)) {
	switch {
	case ret == nvml.SUCCESS:
		merge(list)
	case ret == nvml.ERROR_NOT_FOUND:
	case ret == nvml.ERROR_NOT_SUPPORTED && unsupported != nil:
		*unsupported = true
	default:
		s.nvmlError(call, uuid, ret)
	}
}

// readUtilization reads the SM utilisation samples of d newer than the last one
// seen and adds them to the device's processes. Per NVML, a sample is returned only
// for a process that was active in the sample period, so a listed process without a
// sample was idle (0); a sample of a PID not in the process list (the process
// exited) is ignored, as are samples with PID 0 or SmUtil above 100 that some
// drivers return, and samples stamped more than an Interval after now (counted already
// before the clock stepped back, or stamped wrong). On the first call, and when the last
// sample seen is more than an Interval ahead of now, the window is one Interval back
// from now. It
// reports whether per-process utilisation is supported on d; procs get smKnown
// only when the read succeeded.
func (s *Sampler) readUtilization(d nvml.Device, uuid string, st *devState, now time.Time, procs []procSample) bool {
	if st.noUtil {
		return false
	}
	// NVML stamps samples with the wall clock (µs since the Unix epoch), as now is. A
	// last-seen time more than an interval ahead of now (the clock stepped back, or a
	// sample stamped in the future got through) would make every sample look old and
	// each process read idle until the clock caught up: start one interval back again.
	ahead := uint64(now.Add(s.cfg.Interval).UnixMicro())
	last := st.lastSeen
	if last == 0 || last > ahead {
		if last != 0 {
			klog.InfoS("NVML utilisation samples seen up to a time ahead of the clock (clock stepped back?): reading from one interval back", "device", uuid, "lastSeen", time.UnixMicro(int64(last)), "now", now)
		}
		last = uint64(now.Add(-s.cfg.Interval).UnixMicro())
	}
	samples, ret := d.GetProcessUtilization(last)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND:
		samples = nil // no sample newer than last: every process was idle
	case nvml.ERROR_NOT_SUPPORTED:
		st.noUtil = true
		return false
	default:
		s.nvmlError(CallDeviceGetProcessUtilization, uuid, ret)
		return true
	}
	newest := last
	for _, smp := range samples {
		if smp.Pid == 0 || smp.TimeStamp <= last || smp.TimeStamp > ahead || smp.SmUtil > 100 {
			continue
		}
		newest = max(newest, smp.TimeStamp)
		for k := range procs {
			if procs[k].pid == smp.Pid {
				procs[k].smSum += float64(smp.SmUtil)
				procs[k].smN++
				break
			}
		}
	}
	st.lastSeen = newest
	for k := range procs {
		procs[k].smKnown = true
	}
	return true
}

// returnNames are the NVML return codes' constant names, stable across driver versions
// (nvmlErrorString's text is not), for the "error" label.
var returnNames = map[nvml.Return]string{
	nvml.SUCCESS:                       "SUCCESS",
	nvml.ERROR_UNINITIALIZED:           "ERROR_UNINITIALIZED",
	nvml.ERROR_INVALID_ARGUMENT:        "ERROR_INVALID_ARGUMENT",
	nvml.ERROR_NOT_SUPPORTED:           "ERROR_NOT_SUPPORTED",
	nvml.ERROR_NO_PERMISSION:           "ERROR_NO_PERMISSION",
	nvml.ERROR_NOT_FOUND:               "ERROR_NOT_FOUND",
	nvml.ERROR_INSUFFICIENT_SIZE:       "ERROR_INSUFFICIENT_SIZE",
	nvml.ERROR_DRIVER_NOT_LOADED:       "ERROR_DRIVER_NOT_LOADED",
	nvml.ERROR_TIMEOUT:                 "ERROR_TIMEOUT",
	nvml.ERROR_LIBRARY_NOT_FOUND:       "ERROR_LIBRARY_NOT_FOUND",
	nvml.ERROR_FUNCTION_NOT_FOUND:      "ERROR_FUNCTION_NOT_FOUND",
	nvml.ERROR_GPU_IS_LOST:             "ERROR_GPU_IS_LOST",
	nvml.ERROR_RESET_REQUIRED:          "ERROR_RESET_REQUIRED",
	nvml.ERROR_OPERATING_SYSTEM:        "ERROR_OPERATING_SYSTEM",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH: "ERROR_LIB_RM_VERSION_MISMATCH",
	nvml.ERROR_MEMORY:                  "ERROR_MEMORY",
	nvml.ERROR_NO_DATA:                 "ERROR_NO_DATA",
	nvml.ERROR_UNKNOWN:                 "ERROR_UNKNOWN",
}

// returnName is r's constant name (returnNames), or ERROR_<code> for a code not listed.
func returnName(r nvml.Return) string {
	if n, ok := returnNames[r]; ok {
		return n
	}
	return "ERROR_" + strconv.Itoa(int(r))
}

// initHint explains an nvmlInit failure to an operator.
func initHint(r nvml.Return) string {
	switch r {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 could not be loaded: install the NVIDIA driver on the node and run the agent with the nvidia container runtime (runtimeClassName: nvidia) or mount the driver's libraries and pass --nvml-library"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "the NVIDIA kernel driver is not loaded on this node"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to open /dev/nvidia*: run the agent privileged"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "the NVML library and the kernel driver versions differ: the driver was upgraded without a reboot"
	}
	return "see the NVIDIA driver's logs (dmesg)"
}
