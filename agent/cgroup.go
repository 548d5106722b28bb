package agent

import (
	"bytes"
	"strings"
)

// CgroupInfo is what a process's cgroup path says about the container that runs it.
type CgroupInfo struct {
	// PodUID is the Kubernetes pod UID in its canonical form (lowercase, with
	// dashes: "1234abcd-56ef-..."), or, for a static pod, the 32-hex-digit hash the
	// kubelet uses as its UID. Empty when the path names no pod.
	PodUID string
	// ContainerID is the container runtime's ID of the container: 64 lowercase hex
	// digits, without the runtime prefix ("cri-containerd-", "crio-", "docker-").
	// Empty when the path names no container.
	ContainerID string
}

// ParseCgroup reads the contents of /proc/<pid>/cgroup, in either the cgroup v1
// format (one "hierarchy-ID:controllers:path" line per hierarchy) or the v2 format
// (one "0::path" line), and returns the pod and container of the first line that
// names both, else of the first line that names either. ok is false when no line
// names a pod or a container: a host process, or one in a cgroup layout this parser
// does not know.
//
// Known layouts (each with the cgroupfs and the systemd cgroup driver, under any
// prefix, including the "/../.." prefix seen from another cgroup namespace):
//
//	cgroupfs, containerd/Docker: /kubepods/burstable/pod<uid>/<id>
//	cgroupfs, CRI-O:             /kubepods/burstable/pod<uid>/crio-<id>
//	systemd, containerd:         /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
//	systemd, CRI-O:              .../kubepods-pod<uid>.slice/crio-<id>.scope
//	systemd, Docker:             .../kubepods-besteffort-pod<uid>.slice/docker-<id>.scope
//	containerd's systemd path:   /system.slice/containerd.service/kubepods-burstable-pod<uid>.slice:cri-containerd:<id>
//	Docker without Kubernetes:   /docker/<id> or /system.slice/docker-<id>.scope (container only)
func ParseCgroup(data []byte) (info CgroupInfo, ok bool) {
	var partial CgroupInfo
	havePartial := false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		// hierarchy-ID:controllers:path; the path itself may contain ':'.
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			continue
		}
		j := bytes.IndexByte(line[i+1:], ':')
		if j < 0 {
			continue
		}
		got, found := ParseCgroupPath(string(line[i+1+j+1:]))
		if !found {
			continue
		}
		if got.PodUID != "" && got.ContainerID != "" {
			return got, true
		}
		if !havePartial {
			partial, havePartial = got, true
		}
	}
	return partial, havePartial
}

// ParseCgroupPath extracts the pod UID and container ID from one cgroup path (see
// ParseCgroup for the layouts). The container is the segment right after the pod's,
// so processes in nested cgroups inside a container are found too. ok is false
// when the path names neither a pod nor a container.
func ParseCgroupPath(path string) (info CgroupInfo, ok bool) {
	segs := strings.Split(strings.TrimSpace(path), "/")
	for i, seg := range segs {
		uid, rest, found := podSegment(seg)
		if !found {
			continue
		}
		info.PodUID = uid
		if rest != "" {
			// containerd's systemd notation: "<pod slice>:cri-containerd:<id>".
			info.ContainerID = containerSegment(rest)
		} else if i+1 < len(segs) {
			info.ContainerID = containerSegment(segs[i+1])
		}
		return info, true
	}
	// No pod: a container outside Kubernetes, found by the last segment that is one.
	for i := len(segs) - 1; i >= 0; i-- {
		if id := containerSegment(segs[i]); id != "" {
			return CgroupInfo{ContainerID: id}, true
		}
	}
	return CgroupInfo{}, false
}

// podSegment recognises a pod's cgroup: "pod<uid>" (cgroupfs) or
// "kubepods[-<qos>]-pod<uid_with_underscores>.slice" (systemd), optionally followed
// by ":<prefix>:<id>". It returns the canonical UID and the text after the first ':'.
func podSegment(seg string) (uid, rest string, ok bool) {
	if i := strings.IndexByte(seg, ':'); i >= 0 {
		seg, rest = seg[:i], seg[i+1:]
	}
	var raw string
	switch {
	case strings.HasSuffix(seg, ".slice"):
		i := strings.LastIndex(seg, "-pod")
		if i < 0 {
			return "", "", false
		}
		raw = strings.ReplaceAll(seg[i+len("-pod"):len(seg)-len(".slice")], "_", "-")
	case strings.HasPrefix(seg, "pod"):
		raw = seg[len("pod"):]
	default:
		return "", "", false
	}
	if !isPodUID(raw) {
		return "", "", false
	}
	return strings.ToLower(raw), rest, true
}

// isPodUID accepts an RFC 4122 UUID (8-4-4-4-12 hex digits) or 32 hex digits (the
// UID the kubelet gives a static pod).
func isPodUID(s string) bool {
	switch len(s) {
	case 32:
		return isHex(s)
	case 36:
		for i := 0; i < len(s); i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return false
				}
			} else if !isHexByte(s[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// containerSegment returns the 64-hex-digit container ID of a container's cgroup
// segment: "<id>", "<runtime>-<id>[.scope]" (cri-containerd, crio, crio-conmon,
// docker, containerd, libpod), "<runtime>:<id>" or "<prefix>:<runtime>:<id>"; "" when
// the segment is none of these.
func containerSegment(seg string) string {
	seg = strings.TrimSuffix(seg, ".scope")
	if i := strings.LastIndexAny(seg, ":-"); i >= 0 {
		seg = seg[i+1:]
	}
	if len(seg) != 64 || !isHex(seg) {
		return ""
	}
	return strings.ToLower(seg)
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHexByte(s[i]) {
			return false
		}
	}
	return true
}

func isHexByte(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}
