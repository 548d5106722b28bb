package admission

import (
	"encoding/json"
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
	limitsEq := equality.Semantic.DeepEqual(orig.Limits, mod.Limits)
	requestsEq := equality.Semantic.DeepEqual(orig.Requests, mod.Requests)
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
	if equality.Semantic.DeepEqual(orig, mod) {
		return ops
	}
	if len(orig) == 0 {
		return append(ops, jsonpatch.NewOperation("add", path, mod))
	}
	for j := range mod {
		switch {
		case j >= len(orig):
			ops = append(ops, jsonpatch.NewOperation("add", path+"/-", mod[j]))
		case !equality.Semantic.DeepEqual(orig[j], mod[j]):
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
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
