package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Owner is the Kubernetes container a GPU process belongs to.
type Owner struct {
	// Namespace and Pod name the pod (from the API server's pod object).
	Namespace string
	Pod       string
	// Container is the container's name in the pod spec.
	Container string
}

// Reasons why a process is not attributed to a container; they are the values of
// the "reason" label of gpufrac_agent_unattributed_processes.
const (
	// ReasonHost: the process's cgroup names no pod and no known container (a host
	// process, or a container that Kubernetes does not run).
	ReasonHost = "host"
	// ReasonUnknownPod: the cgroup names a pod or container that the agent's pod
	// informer does not know (not yet synced, another node, or already deleted).
	ReasonUnknownPod = "unknown_pod"
	// ReasonUnknownContainer: the pod is known but none of its container statuses
	// has the process's container ID, and the pod has several containers that may run
	// (PodLookup.LookupPod: spec containers, native sidecars, init and ephemeral
	// containers not terminated).
	ReasonUnknownContainer = "unknown_container"
	// ReasonUnreadable: /proc/<pid>/cgroup exists but could not be read (e.g.
	// permission denied).
	ReasonUnreadable = "unreadable"
	// ReasonGone: the process exited between NVML's process list and the /proc read
	// (or its PID is not visible in the proc root). Such processes are skipped and
	// counted in gpufrac_agent_vanished_processes_total, not as unattributed.
	ReasonGone = "gone"
)

// Attribution is the result of attributing one PID: Owner when Reason is empty,
// else the Reason* constant that says why there is no owner.
type Attribution struct {
	// Owner is the process's container; set only when Reason is empty.
	Owner Owner
	// Reason is "" when attributed, else one of the Reason* constants.
	Reason string
}

// Attributor maps the PID of a GPU process (in the agent's PID namespace, which
// must be the host's) to the Kubernetes container that runs it. It is called from
// the sampler's goroutine only.
type Attributor interface {
	Attribute(pid uint32) Attribution
}

// PodLookup resolves what a cgroup path says to a Kubernetes container. PodIndex
// implements it from a pod informer; tests use a static map.
type PodLookup interface {
	// LookupContainer returns the owner of the container whose runtime ID is id (64
	// hex digits, no "containerd://" scheme).
	LookupContainer(id string) (Owner, bool)
	// LookupPod returns the namespace and name of the pod whose UID (or, for a mirror
	// pod, static pod hash) is uid, and the names of its containers that may run a
	// process now (spec containers, native sidecars, init and ephemeral containers not
	// terminated): a process is its only one's when there is one.
	LookupPod(uid string) (namespace, name string, containers []string, ok bool)
}

// ProcAttributor attributes PIDs by reading <ProcRoot>/<pid>/cgroup (ParseCgroup)
// and resolving the container ID, else the pod UID, through Pods.
type ProcAttributor struct {
	// ProcRoot is the host's /proc as the agent sees it: "/proc" with hostPID, or
	// where the host's /proc is mounted (e.g. /host/proc).
	ProcRoot string
	// Pods resolves container IDs and pod UIDs.
	Pods PodLookup
}

// Attribute reads the process's cgroup and looks its container up: by container ID
// first, then by pod UID (taking the pod's only container that may run, when its
// container ID is not yet in the pod's status). A missing /proc entry gives ReasonGone.
func (a *ProcAttributor) Attribute(pid uint32) Attribution {
	data, err := os.ReadFile(filepath.Join(a.ProcRoot, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH):
		return Attribution{Reason: ReasonGone}
	case err != nil:
		return Attribution{Reason: ReasonUnreadable}
	case len(data) == 0:
		// The file of a process that exited after open reads empty.
		return Attribution{Reason: ReasonGone}
	}
	info, ok := ParseCgroup(data)
	if !ok {
		return Attribution{Reason: ReasonHost}
	}
	return resolve(a.Pods, info)
}

// resolve turns a parsed cgroup into an Attribution through pods.
func resolve(pods PodLookup, info CgroupInfo) Attribution {
	if info.ContainerID != "" {
		if o, ok := pods.LookupContainer(info.ContainerID); ok {
			return Attribution{Owner: o}
		}
	}
	if info.PodUID == "" {
		// A container that no pod of this node has: Docker or Podman outside
		// Kubernetes, or a system container.
		return Attribution{Reason: ReasonHost}
	}
	ns, name, containers, ok := pods.LookupPod(info.PodUID)
	if !ok {
		return Attribution{Reason: ReasonUnknownPod}
	}
	if len(containers) == 1 {
		return Attribution{Owner: Owner{Namespace: ns, Pod: name, Container: containers[0]}}
	}
	return Attribution{Reason: ReasonUnknownContainer}
}
