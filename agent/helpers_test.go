package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU is the state behind a go-nvml mock.Device; tests change it between cycles.
type fakeGPU struct {
	mu       sync.Mutex
	uuid     string
	name     string
	total    uint64
	used     uint64
	memRet   nvml.Return
	compute  []nvml.ProcessInfo
	mps      []nvml.ProcessInfo
	graphics []nvml.ProcessInfo
	// Return codes of the process-list calls (SUCCESS when zero).
	computeRet, mpsRet, graphicsRet nvml.Return
	samples                         []nvml.ProcessUtilizationSample
	utilRet                         nvml.Return // forced return of GetProcessUtilization
	uuidRet                         nvml.Return
}

// device returns a mock.Device over g: process lists and memory from g, and
// GetProcessUtilization filtering g.samples by lastSeen as NVML does (ERROR_NOT_FOUND
// when none is newer).
func (g *fakeGPU) device() *mock.Device {
	d := &mock.Device{}
	g.setFuncs(d)
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.utilRet != nvml.SUCCESS {
			return nil, g.utilRet
		}
		var out []nvml.ProcessUtilizationSample
		for _, s := range g.samples {
			if s.TimeStamp > last || s.Pid == 0 {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	return d
}

// setFuncs sets the calls a whole GPU and a MIG device share.
func (g *fakeGPU) setFuncs(d *mock.Device) {
	d.GetUUIDFunc = func() (string, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.uuid, g.uuidRet
	}
	d.GetNameFunc = func() (string, nvml.Return) { return g.name, nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return nvml.Memory{Total: g.total, Used: g.used, Free: g.total - g.used}, g.memRet
	}
	list := func(l *[]nvml.ProcessInfo, ret *nvml.Return) func() ([]nvml.ProcessInfo, nvml.Return) {
		return func() ([]nvml.ProcessInfo, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if *ret != nvml.SUCCESS {
				return nil, *ret
			}
			return append([]nvml.ProcessInfo(nil), (*l)...), nvml.SUCCESS
		}
	}
	d.GetComputeRunningProcessesFunc = list(&g.compute, &g.computeRet)
	d.GetMPSComputeRunningProcessesFunc = list(&g.mps, &g.mpsRet)
	d.GetGraphicsRunningProcessesFunc = list(&g.graphics, &g.graphicsRet)
}

// fakeLib returns a mock.Interface with the given devices.
func fakeLib(devs ...nvml.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
}

// fakePods is a static PodLookup.
type fakePods struct {
	containers map[string]Owner // container ID → owner
	pods       map[string]fakePod
}

type fakePod struct {
	namespace, name string
	containers      []string
}

func (f *fakePods) LookupContainer(id string) (Owner, bool) {
	o, ok := f.containers[id]
	return o, ok
}

func (f *fakePods) LookupPod(uid string) (string, string, []string, bool) {
	p, ok := f.pods[uid]
	return p.namespace, p.name, p.containers, ok
}

// cluster builds a fake proc root and pod lookup: addPod registers a pod with one
// container and returns a cgroup file content for a process in it.
type cluster struct {
	root string
	pods *fakePods
	n    int
}

func newCluster(t testing.TB) *cluster {
	return &cluster{root: t.TempDir(), pods: &fakePods{containers: map[string]Owner{}, pods: map[string]fakePod{}}}
}

// addContainer registers namespace/pod/container (in systemd layout when systemd)
// and returns the cgroup file content of a process in it.
func (c *cluster) addContainer(ns, pod, container string, systemd bool) string {
	c.n++
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", c.n, c.n)
	cid := strings.Repeat(fmt.Sprintf("%08x", c.n), 8)
	c.pods.containers[cid] = Owner{Namespace: ns, Pod: pod, Container: container}
	p := c.pods.pods[uid]
	c.pods.pods[uid] = fakePod{namespace: ns, name: pod, containers: append(p.containers, container)}
	if systemd {
		return fmt.Sprintf("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope\n", strings.ReplaceAll(uid, "-", "_"), cid)
	}
	return fmt.Sprintf("0::/kubepods/burstable/pod%s/%s\n", uid, cid)
}

// proc writes <root>/<pid>/cgroup.
func (c *cluster) proc(pid uint32, cgroup string) {
	dir := filepath.Join(c.root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		panic(err)
	}
}

// kill removes <root>/<pid>.
func (c *cluster) kill(pid uint32) {
	if err := os.RemoveAll(filepath.Join(c.root, fmt.Sprint(pid))); err != nil {
		panic(err)
	}
}

func (c *cluster) attributor() *ProcAttributor {
	return &ProcAttributor{ProcRoot: c.root, Pods: c.pods}
}
