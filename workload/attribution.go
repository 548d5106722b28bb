package workload

import (
	"strings"
)

// SafeAlphabet is the alphabet of Kubernetes' generated name parts, pod-template hashes
// and pod name suffixes (k8s.io/apimachinery/pkg/util/rand.SafeEncodeString, whose
// constant is unexported): no vowels and no 0, 1 or 3, so names cannot spell words. The
// trace package generates names in it and this package recognises them.
const SafeAlphabet = "bcdfghjklmnpqrstvwxz2456789"

func allIn(s, alphabet string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune(alphabet, r) {
			return false
		}
	}
	return true
}

// Owner is a controller named by an ownership series.
type Owner struct {
	Kind string
	Name string
}

// Ownership holds kube-state-metrics ownership: kube_pod_owner (pod → owner) and
// kube_replicaset_owner (ReplicaSet → owner), by namespace and name, and the lives of
// the pods of each name (kube_pod_created, kube_pod_completion_time).
type Ownership struct {
	Pods        map[[2]string]Owner // {namespace, pod} → owner
	ReplicaSets map[[2]string]Owner // {namespace, replicaset} → owner
	// Lives are the pods of each {namespace, pod} name by uid.
	Lives map[[2]string]map[string]Life
}

// NewOwnership returns empty ownership maps.
func NewOwnership() *Ownership {
	return &Ownership{Pods: map[[2]string]Owner{}, ReplicaSets: map[[2]string]Owner{}, Lives: map[[2]string]map[string]Life{}}
}

// AddLife merges what kube-state-metrics reported of the pod uid of a name: a zero time
// keeps the one known.
func (o *Ownership) AddLife(key [2]string, uid string, l Life) {
	m := o.Lives[key]
	if m == nil {
		m = map[string]Life{}
		o.Lives[key] = m
	}
	old := m[uid]
	if l.Created.IsZero() {
		l.Created = old.Created
	}
	if l.Completed.IsZero() {
		l.Completed = old.Completed
	}
	m[uid] = l
}

// Attributor maps a pod name seen in metrics to the workload it belonged to, for pods
// that no longer exist. Methods are tried in order: live pods (owner references),
// kube-state-metrics ownership, pod naming conventions against the given targets.
type Attributor struct {
	// Live maps {namespace, pod} of pods that exist now to their top-most controller.
	Live map[[2]string]Ref
	// KSM is ownership from kube-state-metrics; nil when Prometheus has none.
	KSM *Ownership
	// Targets are the autoscaler targets by namespace, for naming conventions.
	Targets map[string][]Ref
}

// Method says how a pod was attributed.
type Method int

// Attribution methods, from most to least reliable.
const (
	MethodNone Method = iota
	MethodOwnerReferences
	MethodKubeStateMetrics
	MethodNamingConvention
)

// Attribute returns the workload of a pod and how it was found, or MethodNone.
func (a *Attributor) Attribute(namespace, pod string) (Ref, Method) {
	key := [2]string{namespace, pod}
	if r, ok := a.Live[key]; ok {
		return r, MethodOwnerReferences
	}
	if a.KSM != nil {
		if o, ok := a.KSM.Pods[key]; ok {
			if o.Kind == "Job" {
				if c, ok := a.cronJobOf(namespace, o.Name); ok {
					return c, MethodKubeStateMetrics
				}
			}
			if o.Kind == "ReplicaSet" {
				if ro, ok := a.KSM.ReplicaSets[[2]string{namespace, o.Name}]; ok {
					return Ref{Namespace: namespace, Kind: ro.Kind, Name: ro.Name}, MethodKubeStateMetrics
				}
				if d, ok := deploymentOfReplicaSet(o.Name); ok {
					return a.replicaSetOwner(namespace, d), MethodKubeStateMetrics
				}
			}
			return Ref{Namespace: namespace, Kind: o.Kind, Name: o.Name}, MethodKubeStateMetrics
		}
	}
	var best Ref
	for _, t := range a.Targets[namespace] {
		if MatchesNamingConvention(t.Kind, t.Name, pod) && len(t.Name) > len(best.Name) {
			best = t
		}
	}
	if best.Name != "" {
		return best, MethodNamingConvention
	}
	return Ref{}, MethodNone
}

// replicaSetOwner returns the workload named name that owns a ReplicaSet
// "<name>-<hash>" kube-state-metrics holds no owner for: a Deployment, or a target of
// that name whose kind is not native (an Argo Rollout manages ReplicaSets named so),
// where no Deployment target has the name.
func (a *Attributor) replicaSetOwner(namespace, name string) Ref {
	out := Ref{Namespace: namespace, Kind: "Deployment", Name: name}
	for _, t := range a.Targets[namespace] {
		if t.Name != name {
			continue
		}
		if t.Kind == "Deployment" {
			return t
		}
		if _, native := nativeKinds[t.Kind]; !native {
			out = t
		}
	}
	return out
}

// cronJobOf returns the CronJob target of namespace whose Jobs are named like job: the
// CronJob controller names each Job "<cronjob>-<scheduled time in minutes>", and
// kube_pod_owner names the Job, not its CronJob (kube_job_owner is not read), so
// without this a CronJob's pods that no longer exist were attributed to a Job no
// autoscaler targets and its history began with the pods still kept.
func (a *Attributor) cronJobOf(namespace, job string) (Ref, bool) {
	var best Ref
	for _, t := range a.Targets[namespace] {
		if t.Kind == "CronJob" && strings.HasPrefix(job, t.Name+"-") && allIn(job[len(t.Name)+1:], "0123456789") && len(t.Name) > len(best.Name) {
			best = t
		}
	}
	return best, best.Name != ""
}

// deploymentOfReplicaSet strips a pod-template hash: "<deployment>-<hash>".
func deploymentOfReplicaSet(rs string) (string, bool) {
	i := strings.LastIndexByte(rs, '-')
	if i <= 0 || !allIn(rs[i+1:], SafeAlphabet) {
		return "", false
	}
	return rs[:i], true
}

// MatchesNamingConvention reports whether a pod name follows the naming convention of
// pods of the given workload: Deployment "<name>-<pod-template-hash>-<suffix>",
// StatefulSet "<name>-<ordinal>", DaemonSet, ReplicaSet and Job "<name>-<suffix>",
// CronJob "<name>-<scheduled time in minutes>-<suffix>" (its Job's pods), where
// hash and suffix use Kubernetes' safe alphabet; a kind that is not native (a target
// through its scale subresource) is taken as the Deployment's convention, that of the
// pods of the ReplicaSets it manages (Argo Rollouts). The match is ambiguous when one
// workload's name is another's plus such a segment (web and web-2b4c6): Attributor then
// prefers the longest target name.
func MatchesNamingConvention(kind, name, pod string) bool {
	if !strings.HasPrefix(pod, name+"-") {
		return false
	}
	rest := pod[len(name)+1:]
	switch kind {
	case "StatefulSet":
		return allIn(rest, "0123456789")
	case "CronJob":
		minutes, suffix, ok := strings.Cut(rest, "-")
		return ok && allIn(minutes, "0123456789") && len(suffix) == 5 && allIn(suffix, SafeAlphabet)
	case "DaemonSet", "ReplicaSet", "Job":
		return len(rest) == 5 && allIn(rest, SafeAlphabet)
	}
	// Deployment, and a kind that is not native.
	hash, suffix, ok := strings.Cut(rest, "-")
	return ok && allIn(hash, SafeAlphabet) && len(suffix) == 5 && allIn(suffix, SafeAlphabet)
}
