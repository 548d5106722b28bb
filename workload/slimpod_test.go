package workload

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// base is the start of the times a filled pod holds (creation, deletion, container
// starts and ends): an hour from here.
var base = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// filledPod returns a pod with every field set from seed (randfill), then made
// readable: container statuses named after containers (some missing), GPU resources,
// sidecars, the sharing backends' annotations and a controller owner.
func filledPod(seed int64) *corev1.Pod {
	f := randfill.NewWithSeed(seed).NilChance(0.1).NumElements(1, 3).Funcs(
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.NewTime(base.Add(time.Duration(c.Int63n(3600)) * time.Second))
		},
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(8)+1, resource.DecimalSI)
		},
		func(t *metav1.MicroTime, c randfill.Continue) { *t = metav1.NewMicroTime(base) },
	)
	var p corev1.Pod
	f.Fill(&p)
	rf := randfill.NewWithSeed(seed)
	name := func(kind string, i int) string { return fmt.Sprintf("%s-%d", kind, i) }
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		c.Name = name("init", i)
		c.RestartPolicy = nil
		if i%2 == 0 {
			c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways) // a native sidecar
		}
	}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		c.Name = name("main", i)
		if i == 0 {
			c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}
	}
	for i := range p.Status.InitContainerStatuses {
		p.Status.InitContainerStatuses[i].Name = name("init", i)
	}
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Name = name("main", i)
		var restarts int32
		rf.Fill(&restarts)
		p.Status.ContainerStatuses[i].RestartCount = restarts & 3
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[HAMiAllocatedAnnotation] = "GPU-a,NVIDIA,4000,30:;GPU-b,NVIDIA,2000,10"
	p.Annotations[KAIContainerNameAnnotation] = name("main", 0)
	p.Annotations["gpu-fraction"] = "0.5"
	p.Annotations[gpufracv1.AnnotationApplied] = `{"backend":"hami","containers":[{"name":"main-0","writtenMemory":"4Gi"}]}`
	p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", Controller: ptr.To(true)})
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	return &p
}

// reads are the answers of every reader of a pod in the recommender and this package,
// as one comparable string.
func reads(p *corev1.Pod) string {
	var b strings.Builder
	pr := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	pr("meta %s/%s uid %s labels %v annotations %v created %v deleted %v", p.Namespace, p.Name, p.UID, p.Labels, p.Annotations, p.CreationTimestamp, p.DeletionTimestamp)
	pr("controller %+v", metav1.GetControllerOf(p))
	pr("phase %s", p.Status.Phase)
	rec, err := gpufracv1.ParseApplied(p.Annotations)
	pr("applied %+v %v", rec, err)
	for _, c := range Containers(p) {
		pr("container %s %s %d init-list %v requests a GPU %v", c.Container.Name, c.Type, c.Index, c.InitList(), requestsPrefix(c.Container, GPUResourcePrefix))
		t, ok := ContainerTypeOf(p, c.Container.Name)
		pr("type %s %v", t, ok)
	}
	pr("gpu containers %v", GPUContainers(p))
	gpus, by := AllocatedGPUs(p)
	pr("allocated %v %s hami %v", gpus, by, HAMiDevices(p))
	names := []string{"absent"}
	for _, c := range Containers(p) {
		names = append(names, c.Container.Name)
	}
	for _, n := range names {
		end, ok := LifeEnd(p, n)
		pr("life end %s %v %v", n, end, ok)
		for t := base.Add(-time.Minute); t.Before(base.Add(62 * time.Minute)); t = t.Add(30 * time.Second) {
			for _, v := range []float64{0, 1} {
				at, ok := StampInLife(p, n, t, 5*time.Minute, v)
				pr("%s %v %v: in life %v, stamp %v %v", n, t, v, SampleInLife(p, n, t, v), at, ok)
			}
		}
	}
	return b.String()
}

// Every reader answers the same on the slim pod as on the full one, for pods with every
// field set, and the slim pod is smaller and has no managedFields.
func TestSlimPodKeepsWhatIsRead(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		p := filledPod(seed)
		full := p.DeepCopy()
		out, err := SlimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		slim := out.(*corev1.Pod)
		if !reflect.DeepEqual(p, full) {
			t.Fatalf("seed %d: SlimPod changed its input", seed)
		}
		if got, want := reads(slim), reads(full); got != want {
			t.Errorf("seed %d: a reader answers differently on the slim pod:\n%s", seed, firstDiff(got, want))
		}
		if slim.ManagedFields != nil {
			t.Errorf("seed %d: managedFields kept", seed)
		}
		if s, f := slim.Size(), full.Size(); s >= f {
			t.Errorf("seed %d: slim pod %d bytes (protobuf), full %d", seed, s, f)
		}
	}
}

// The check above can fail: taking away any field a reader uses changes reads.
func TestReadsSeeEachKeptField(t *testing.T) {
	strip := map[string]func(*corev1.Pod){
		"annotations":           func(p *corev1.Pod) { p.Annotations = nil },
		"owner references":      func(p *corev1.Pod) { p.OwnerReferences = nil },
		"creation time":         func(p *corev1.Pod) { p.CreationTimestamp = metav1.Time{} },
		"container resources":   func(p *corev1.Pod) { p.Spec.Containers[0].Resources = corev1.ResourceRequirements{} },
		"init containers":       func(p *corev1.Pod) { p.Spec.InitContainers = nil },
		"sidecar restartPolicy": func(p *corev1.Pod) { p.Spec.InitContainers[0].RestartPolicy = nil },
		"phase":                 func(p *corev1.Pod) { p.Status.Phase = "" },
		"container states":      func(p *corev1.Pod) { p.Status.ContainerStatuses = nil },
	}
	p := filledPod(3)
	if p.DeletionTimestamp == nil {
		t.Fatal("seed 3 has no deletion time; pick a seed that sets every field these cases strip")
	}
	strip["deletion time"] = func(p *corev1.Pod) { p.DeletionTimestamp = nil }
	want := reads(p)
	for name, f := range strip {
		q := p.DeepCopy()
		f(q)
		if reads(q) == want {
			t.Errorf("reads does not see %s", name)
		}
	}
}

// Only GPU requests and limits are kept, and pods with the same ones share them.
func TestSlimPodSharesGPUResources(t *testing.T) {
	pod := func(gpu, cpu string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "main", Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpu), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpu), corev1.ResourceCPU: resource.MustParse(cpu)}}},
			{Name: "sidecar", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}},
		}}}
	}
	slim := func(p *corev1.Pod) *corev1.Pod { out, _ := SlimPod(p); return out.(*corev1.Pod) }
	a, b, c := slim(pod("1", "1")), slim(pod("1", "2")), slim(pod("2", "1"))
	ra := a.Spec.Containers[0].Resources
	if len(ra.Limits) != 1 || len(ra.Requests) != 1 || ra.Limits.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 1 {
		t.Errorf("kept %v, want nvidia.com/gpu=1 alone in limits and requests", ra)
	}
	if r := a.Spec.Containers[1].Resources; r.Limits != nil || r.Requests != nil {
		t.Errorf("container without GPU kept %v", r)
	}
	if reflect.ValueOf(ra.Limits).Pointer() != reflect.ValueOf(b.Spec.Containers[0].Resources.Limits).Pointer() {
		t.Error("equal GPU resources not shared")
	}
	if rc := c.Spec.Containers[0].Resources; reflect.ValueOf(ra.Limits).Pointer() == reflect.ValueOf(rc.Limits).Pointer() ||
		rc.Limits.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 2 {
		t.Errorf("other GPU resources %v shared with %v", rc, ra)
	}
}

// Objects other than pods pass through unchanged.
func TestSlimPodOtherObjects(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	out, err := SlimPod(n)
	if err != nil || out != any(n) {
		t.Errorf("SlimPod(node) = %v, %v; want the node itself", out, err)
	}
}

// firstDiff returns the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return "slim: " + g[i] + "\nfull: " + w[i]
		}
	}
	return fmt.Sprintf("%d lines against %d", len(g), len(w))
}
