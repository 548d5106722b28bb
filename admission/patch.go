package admission

import (
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// diffPod returns the JSON patch (RFC 6902) that turns orig into mod, covering only the
// fields a backend may change: metadata.annotations, metadata.labels,
// spec.schedulerName, spec.nodeSelector, each pod claim's resourceClaimTemplateName, and each container's
// and init container's resources.limits, resources.requests and env.
// Patching only these paths, rather than re-serialising the whole decoded pod, never
// drops fields that this binary's API types do not know (a newer cluster's).
func diffPod(orig, mod *corev1.Pod) []jsonpatch.Operation {
	var ops []jsonpatch.Operation
	ops = diffStringMap(ops, "/metadata/annotations", orig.Annotations, mod.Annotations)
	ops = diffStringMap(ops, "/metadata/labels", orig.Labels, mod.Labels)
	// The device-plugin backends select the plan's node pool.
	ops = diffStringMap(ops, "/spec/nodeSelector", orig.Spec.NodeSelector, mod.Spec.NodeSelector)
	if orig.Spec.SchedulerName != mod.Spec.SchedulerName {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/schedulerName", jsonString(mod.Spec.SchedulerName)))
	}
	for i := range mod.Spec.ResourceClaims {
		// The dra backend points a pod claim at another ResourceClaimTemplate.
		if o, m := orig.Spec.ResourceClaims[i].ResourceClaimTemplateName, mod.Spec.ResourceClaims[i].ResourceClaimTemplateName; m != nil && (o == nil || *o != *m) {
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/resourceClaims/"+strconv.Itoa(i)+"/resourceClaimTemplateName", jsonString(*m)))
		}
	}
	ops = diffContainers(ops, "/spec/initContainers/", orig.Spec.InitContainers, mod.Spec.InitContainers)
	return diffContainers(ops, "/spec/containers/", orig.Spec.Containers, mod.Spec.Containers)
}

// patchableCopy returns a copy of pod for a backend to write into: the fields diffPod
// covers (annotations, labels, node selector, resource claims, each container's
// resources and env) are deep copies, the rest is shared with pod and must not be
// written (a write there would never reach the patch anyway). It saves deep-copying the
// whole pod (volumes, managed fields, probes) on every request.
func patchableCopy(pod *corev1.Pod) *corev1.Pod {
	mod := *pod
	mod.Annotations = maps.Clone(pod.Annotations)
	mod.Labels = maps.Clone(pod.Labels)
	mod.Spec.NodeSelector = maps.Clone(pod.Spec.NodeSelector)
	if pod.Spec.ResourceClaims != nil {
		mod.Spec.ResourceClaims = make([]corev1.PodResourceClaim, len(pod.Spec.ResourceClaims))
		for i := range pod.Spec.ResourceClaims {
			pod.Spec.ResourceClaims[i].DeepCopyInto(&mod.Spec.ResourceClaims[i])
		}
	}
	mod.Spec.InitContainers = patchableContainers(pod.Spec.InitContainers)
	mod.Spec.Containers = patchableContainers(pod.Spec.Containers)
	return &mod
}

// patchableContainers copies cs with deep copies of each container's resources and env.
func patchableContainers(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := slices.Clone(cs)
	for i := range cs {
		cs[i].Resources.DeepCopyInto(&out[i].Resources)
		if cs[i].Env != nil {
			out[i].Env = make([]corev1.EnvVar, len(cs[i].Env))
			for j := range cs[i].Env {
				cs[i].Env[j].DeepCopyInto(&out[i].Env[j])
			}
		}
	}
	return out
}

// diffContainers patches the resources and env of each container of a list (native
// sidecars are written in spec.initContainers, the others in spec.containers).
func diffContainers(ops []jsonpatch.Operation, path string, orig, mod []corev1.Container) []jsonpatch.Operation {
	for i := range mod {
		base := path + strconv.Itoa(i)
		ops = diffResources(ops, base+"/resources", &orig[i].Resources, &mod[i].Resources)
		ops = diffEnv(ops, base+"/env", orig[i].Env, mod[i].Env)
	}
	return ops
}

// diffStringMap patches a map of strings key by key; "add" creates or replaces.
func diffStringMap(ops []jsonpatch.Operation, path string, orig, mod map[string]string) []jsonpatch.Operation {
	if len(orig) == 0 {
		if len(mod) > 0 {
			ops = append(ops, jsonpatch.NewOperation("add", path, mod))
		}
		return ops
	}
	keys := make([]string, 0, len(mod))
	for k, v := range mod {
		if ov, ok := orig[k]; !ok || ov != v {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/"+escapePointer(k), jsonString(mod[k])))
	}
	var gone []string
	for k := range orig {
		if _, ok := mod[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	for _, k := range gone {
		ops = append(ops, jsonpatch.NewOperation("remove", path+"/"+escapePointer(k), nil))
	}
	return ops
}

// diffResources replaces limits and requests as whole maps when they changed (a map of
// resource names holds no unknown fields). When the original had no resources at all,
// the resources object itself is added, so the patch applies whether or not the
// serialised pod carried an empty "resources": {}.
func diffResources(ops []jsonpatch.Operation, path string, orig, mod *corev1.ResourceRequirements) []jsonpatch.Operation {
	limitsEq := resourceListsEqual(orig.Limits, mod.Limits)
	requestsEq := resourceListsEqual(orig.Requests, mod.Requests)
	if limitsEq && requestsEq {
		return ops
	}
	if len(orig.Limits) == 0 && len(orig.Requests) == 0 && len(orig.Claims) == 0 {
		return append(ops, jsonpatch.NewOperation("add", path, resourcesValue(mod)))
	}
	if !limitsEq {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/limits", nonNil(mod.Limits)))
	}
	if !requestsEq {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/requests", nonNil(mod.Requests)))
	}
	return ops
}

// resourceListsEqual is equality.Semantic.DeepEqual for resource lists (nil equals
// empty; quantities compare by value, Quantity.Cmp), without reflection.
func resourceListsEqual(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, qa := range a {
		qb, ok := b[k]
		if !ok || qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}

// envEqual is equality.Semantic.DeepEqual for env lists (nil equals empty); entries
// without valueFrom compare without reflection.
func envEqual(a, b []corev1.EnvVar) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !envVarEqual(&a[i], &b[i]) {
			return false
		}
	}
	return true
}

func envVarEqual(a, b *corev1.EnvVar) bool {
	if a.Name != b.Name || a.Value != b.Value {
		return false
	}
	if a.ValueFrom == nil || b.ValueFrom == nil {
		return a.ValueFrom == b.ValueFrom
	}
	return equality.Semantic.DeepEqual(a.ValueFrom, b.ValueFrom)
}

func nonNil(l corev1.ResourceList) corev1.ResourceList {
	if l == nil {
		return corev1.ResourceList{}
	}
	return l
}

func resourcesValue(r *corev1.ResourceRequirements) map[string]corev1.ResourceList {
	v := map[string]corev1.ResourceList{}
	if len(r.Limits) > 0 {
		v["limits"] = r.Limits
	}
	if len(r.Requests) > 0 {
		v["requests"] = r.Requests
	}
	return v
}

// diffEnv patches env entries by index: backends only replace entries in place or
// append, never remove or reorder.
func diffEnv(ops []jsonpatch.Operation, path string, orig, mod []corev1.EnvVar) []jsonpatch.Operation {
	if envEqual(orig, mod) {
		return ops
	}
	if len(orig) == 0 {
		return append(ops, jsonpatch.NewOperation("add", path, mod))
	}
	for j := range mod {
		switch {
		case j >= len(orig):
			ops = append(ops, jsonpatch.NewOperation("add", path+"/-", mod[j]))
		case !envVarEqual(&orig[j], &mod[j]):
			ops = append(ops, jsonpatch.NewOperation("replace", path+"/"+strconv.Itoa(j), mod[j]))
		}
	}
	return ops
}

// jsonString encodes s as a JSON string value. A plain "" would be dropped by the
// operation's omitempty value and leave an "add" without a value.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// escapePointer escapes a JSON Pointer reference token (RFC 6901).
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return pointerEscaper.Replace(s)
}

// pointerEscaper escapes "~" and "/" in JSON Pointer tokens; built once (a Replacer
// builds its lookup tables on first use).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
