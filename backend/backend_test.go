package backend

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func backend(t *testing.T, cfg Config, b gpufracv1.BackendType) Codec {
	t.Helper()
	return New(cfg)[b]
}

// gpuContainer is a container asking for n nvidia.com/gpu.
func gpuContainer(name string, n int64) corev1.Container {
	l := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(n, resource.DecimalSI)}
	return corev1.Container{Name: name, Image: "img", Resources: corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}}
}

// podOf is a labelled pod of the default scheduler with containers.
func podOf(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: containers, SchedulerName: corev1.DefaultSchedulerName}}
}

// target of container index i: memory in MiB (0 = none), compute in milli (-1 = none).
func target(name string, i int, memMiB, milli int64) *Target {
	t := &Target{Container: name, Index: i, WrittenComputeMilli: -1}
	if memMiB > 0 {
		t.HasMemory, t.MemoryBytes = true, memMiB*MiB
	}
	if milli >= 0 {
		t.HasCompute, t.ComputeMilli = true, milli
	}
	return t
}

func wantUnsafe(t *testing.T, err error, reason string) {
	t.Helper()
	var ue *UnsafeError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want an UnsafeError %s", err, reason)
	}
	if ue.Reason != reason {
		t.Fatalf("reason = %s (%v), want %s", ue.Reason, ue, reason)
	}
}

func resourceValue(c *corev1.Container, list string, name corev1.ResourceName) (int64, bool) {
	l := map[string]corev1.ResourceList{"limits": c.Resources.Limits, "requests": c.Resources.Requests}[list]
	q, ok := l[name]
	return q.Value(), ok
}

func env(c *corev1.Container, name string) (string, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return "", false
	}
	return c.Env[i].Value, true
}

func TestHAMi(t *testing.T) {
	b := backend(t, Config{}, gpufracv1.BackendHAMi)
	pod := podOf(gpuContainer("main", 1), corev1.Container{Name: "sidecar"}, gpuContainer("aux", 1))
	pod.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem-percentage"] = resource.MustParse("50")
	// 4096.5 MiB rounds up to 4097; 351m rounds up to 36%; aux has compute only.
	main := target("main", 0, 0, 351)
	main.HasMemory, main.MemoryBytes = true, 4096*MiB+MiB/2
	aux := target("aux", 2, 0, 0)
	side := target("sidecar", 1, 1024, -1)
	w, err := b.Apply(pod, []*Target{main, side, aux})
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 1 || !strings.Contains(w[0], "sidecar") {
		t.Errorf("warnings %v, want one about the sidecar without a GPU", w)
	}
	c := &pod.Spec.Containers[0]
	for _, list := range []string{"limits", "requests"} {
		if v, _ := resourceValue(c, list, "nvidia.com/gpumem"); v != 4097 {
			t.Errorf("%s gpumem = %d, want 4097 (MiB, rounded up)", list, v)
		}
		if v, _ := resourceValue(c, list, "nvidia.com/gpucores"); v != 36 {
			t.Errorf("%s gpucores = %d, want 36 (percent, rounded up)", list, v)
		}
		if v, _ := resourceValue(c, list, "nvidia.com/gpu"); v != 1 {
			t.Errorf("%s nvidia.com/gpu = %d, want 1 kept", list, v)
		}
	}
	if _, ok := c.Resources.Limits["nvidia.com/gpumem-percentage"]; ok {
		t.Error("gpumem-percentage kept next to gpumem")
	}
	if main.WrittenMemoryBytes != 4097*MiB || main.WrittenComputeMilli != 360 {
		t.Errorf("written %d/%d", main.WrittenMemoryBytes, main.WrittenComputeMilli)
	}
	if len(pod.Spec.Containers[1].Resources.Limits) != 0 || side.Wrote() {
		t.Error("container without nvidia.com/gpu was changed")
	}
	a := &pod.Spec.Containers[2]
	if _, ok := a.Resources.Limits["nvidia.com/gpumem"]; ok {
		t.Error("aux: memory written though not targeted")
	}
	if v, _ := resourceValue(a, "limits", "nvidia.com/gpucores"); v != 1 {
		t.Errorf("aux gpucores = %d, want the minimum 1 for a 0 target", v)
	}
}

// TestHAMiReadMemoryPercentage: a container a pod without a record asks HAMi for a
// share of its GPU by nvidia.com/gpumem-percentage (set by hand before gpufrac, or
// while the webhook was down) holds that share of the GPU's memory, --gpu-memory or the
// GPU its nodeSelector pins it to (Config.ForPod), the smallest it may land on: read
// as absent, the updater took it for a whole GPU (or, next to nvidia.com/gpucores, never
// compared its memory), so one running out at its share was never grown. gpumem, which
// HAMi takes before the percentage, wins; a percentage outside 1-100 is absent.
func TestHAMiReadMemoryPercentage(t *testing.T) {
	b := backend(t, Config{GPUMemoryBytes: 80 << 30}, gpufracv1.BackendHAMi)
	read := func(limits map[corev1.ResourceName]string, pinnedMiB string) (Allocation, bool) {
		c := gpuContainer("a", 1)
		for n, v := range limits {
			c.Resources.Limits[n] = resource.MustParse(v)
		}
		pod := podOf(c)
		if pinnedMiB != "" {
			pod.Spec.NodeSelector = map[string]string{LabelGPUMemory: pinnedMiB}
		}
		a, ok := b.Read(pod)["a"]
		return a, ok
	}
	for pct, want := range map[string]int64{"1": 80 << 30 / 100, "25": 20 << 30, "50": 40 << 30, "99": 80 << 30 * 99 / 100, "100": 80 << 30} {
		if a, _ := read(map[corev1.ResourceName]string{"nvidia.com/gpumem-percentage": pct}, ""); a.Memory != want || a.Compute != -1 {
			t.Errorf("gpumem-percentage %s: read %+v, want %d bytes, no compute", pct, a, want)
		}
	}
	if a, _ := read(map[corev1.ResourceName]string{"nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "30"}, "23034"); a.Memory != 23034*MiB/2 || a.Compute != 300 {
		t.Errorf("50%% of a pinned 23034 MiB GPU, 30%% cores: read %+v, want %d bytes, 300m", a, 23034*MiB/2)
	}
	if a, _ := read(map[corev1.ResourceName]string{"nvidia.com/gpumem-percentage": "50", "nvidia.com/gpumem": "3000"}, ""); a.Memory != 3000*MiB {
		t.Errorf("gpumem beside gpumem-percentage: read %+v, want gpumem's 3000 MiB", a)
	}
	for _, pct := range []string{"0", "101", "-5"} {
		if a, ok := read(map[corev1.ResourceName]string{"nvidia.com/gpumem-percentage": pct}, ""); ok {
			t.Errorf("gpumem-percentage %s: read %+v, want absent", pct, a)
		}
	}
}

func TestHAMiRenamedResourcesAndMultiGPU(t *testing.T) {
	cfg := Config{HAMi: HAMiConfig{MemoryResource: "example.com/vmem", CoresResource: "example.com/vcores"}}
	b := backend(t, cfg, gpufracv1.BackendHAMi)
	pod := podOf(gpuContainer("main", 1))
	if _, err := b.Apply(pod, []*Target{target("main", 0, 100, 1000)}); err != nil {
		t.Fatal(err)
	}
	if v, _ := resourceValue(&pod.Spec.Containers[0], "limits", "example.com/vmem"); v != 100 {
		t.Errorf("renamed memory resource = %d", v)
	}
	if v, _ := resourceValue(&pod.Spec.Containers[0], "limits", "example.com/vcores"); v != 100 {
		t.Errorf("renamed cores resource = %d", v)
	}
	_, err := b.Apply(podOf(gpuContainer("main", 2)), []*Target{target("main", 0, 100, 500)})
	wantUnsafe(t, err, UnsafeMultiGPU)
}

func TestKAIMemory(t *testing.T) {
	b := backend(t, Config{}, gpufracv1.BackendKAI)
	pod := podOf(gpuContainer("main", 1))
	pod.Annotations = map[string]string{"gpu-fraction": "0.9"} // stale user value
	tg := target("main", 0, 4000, 300)
	if _, err := b.Apply(pod, []*Target{tg}); err != nil {
		t.Fatal(err)
	}
	if got := pod.Annotations["gpu-memory"]; got != "4000" {
		t.Errorf("gpu-memory = %q, want 4000", got)
	}
	if _, ok := pod.Annotations["gpu-fraction"]; ok {
		t.Error("gpu-fraction kept next to gpu-memory: KAI forbids both")
	}
	c := &pod.Spec.Containers[0]
	if _, ok := c.Resources.Limits["nvidia.com/gpu"]; ok {
		t.Error("nvidia.com/gpu limit kept next to a fraction")
	}
	if _, ok := c.Resources.Requests["nvidia.com/gpu"]; ok {
		t.Error("nvidia.com/gpu request kept next to a fraction")
	}
	if pod.Spec.SchedulerName != "kai-scheduler" {
		t.Errorf("schedulerName = %q", pod.Spec.SchedulerName)
	}
	if _, ok := pod.Annotations["gpu-fraction-container-name"]; ok {
		t.Error("container name annotation written for the first container")
	}
	if tg.WrittenComputeMilli != -1 {
		t.Error("kai recorded compute, which it does not write")
	}
}

func TestKAIFractionBounds(t *testing.T) {
	cfg := Config{KAI: KAIConfig{Mode: KAIModeFraction}, GPUMemoryBytes: 80 << 30}
	b := backend(t, cfg, gpufracv1.BackendKAI)
	for _, tc := range []struct {
		name   string
		memMiB int64
		want   string
		unsafe string
	}{
		{"quarter", 20 << 10, "0.25", ""},
		{"rounds up", 20<<10 + 1, "0.26", ""},
		{"tiny is at least 0.01", 1, "0.01", ""},
		{"just below one GPU", 80<<10 - 1024, "0.99", ""},
		{"rounds up to one: unsafe", 80<<10 - 1, "", UnsafeWholeGPU},
		{"whole GPU: unsafe", 80 << 10, "", UnsafeWholeGPU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := podOf(gpuContainer("main", 1))
			pod.Annotations = map[string]string{"gpu-memory": "123"}
			_, err := b.Apply(pod, []*Target{target("main", 0, tc.memMiB, -1)})
			if tc.unsafe != "" {
				wantUnsafe(t, err, tc.unsafe)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pod.Annotations["gpu-fraction"]; got != tc.want {
				t.Errorf("gpu-fraction = %q, want %q", got, tc.want)
			}
			if _, ok := pod.Annotations["gpu-memory"]; ok {
				t.Error("gpu-memory kept next to gpu-fraction")
			}
		})
	}
}

func TestKAIRules(t *testing.T) {
	b := backend(t, Config{KAI: KAIConfig{Queue: "team-a"}}, gpufracv1.BackendKAI)

	// Two containers with recommendations: KAI gives a fraction to one container only.
	_, err := b.Apply(podOf(gpuContainer("a", 1), gpuContainer("b", 1)), []*Target{target("a", 0, 100, -1), target("b", 1, 100, -1)})
	wantUnsafe(t, err, UnsafeMultiContainer)

	// A neighbour asking for whole GPUs cannot stay next to a fraction.
	_, err = b.Apply(podOf(gpuContainer("a", 1), gpuContainer("b", 1)), []*Target{target("a", 0, 100, -1)})
	wantUnsafe(t, err, UnsafeWholeGPUNeighbour)

	// Compute only: KAI fractions are memory fractions.
	_, err = b.Apply(podOf(gpuContainer("a", 1)), []*Target{target("a", 0, 0, 300)})
	wantUnsafe(t, err, UnsafeNeedsMemory)

	// A pod bound to another scheduler.
	p := podOf(gpuContainer("a", 1))
	p.Spec.SchedulerName = "volcano"
	_, err = b.Apply(p, []*Target{target("a", 0, 100, -1)})
	wantUnsafe(t, err, UnsafeSchedulerConflict)

	// Multi-device fractions.
	p = podOf(gpuContainer("a", 1))
	p.Annotations = map[string]string{"gpu-fraction-num-devices": "2"}
	_, err = b.Apply(p, []*Target{target("a", 0, 100, -1)})
	wantUnsafe(t, err, UnsafeMultiDevice)

	// Init container with a whole GPU.
	p = podOf(gpuContainer("a", 1))
	p.Spec.InitContainers = []corev1.Container{gpuContainer("init", 1)}
	_, err = b.Apply(p, []*Target{target("a", 0, 100, -1)})
	wantUnsafe(t, err, UnsafeInitContainerGPU)

	// Multi-GPU container.
	_, err = b.Apply(podOf(gpuContainer("a", 2)), []*Target{target("a", 0, 100, -1)})
	wantUnsafe(t, err, UnsafeMultiGPU)

	// A target asking for no GPU (nvidia.com/gpu: 0, or none while no KAI fraction of the
	// pod names it, a recommendation of a container that no longer has one) gets none.
	_, err = b.Apply(podOf(gpuContainer("a", 0)), []*Target{target("a", 0, 100, -1)})
	wantUnsafe(t, err, UnsafeNoGPU)
	p = podOf(corev1.Container{Name: "a"})
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
	_, err = b.Apply(p, []*Target{target("a", 0, 100, -1)})
	wantUnsafe(t, err, UnsafeNoGPU)
	p = podOf(corev1.Container{Name: "a"}, corev1.Container{Name: "b"})
	p.Annotations = map[string]string{"gpu-memory": "4096"} // a's fraction
	_, err = b.Apply(p, []*Target{target("b", 1, 100, -1)})
	wantUnsafe(t, err, UnsafeNoGPU)
	// A pod whose template holds its fraction already (or one KAI placed) is written.
	for _, ann := range []map[string]string{{"gpu-memory": "4096"}, {"gpu-fraction": "0.5"}, {"gpu-fraction": "0.5", "gpu-fraction-container-name": "b"}} {
		p = podOf(corev1.Container{Name: "a"}, corev1.Container{Name: "b"})
		p.Annotations = ann
		name, i := "a", 0
		if ann["gpu-fraction-container-name"] == "b" {
			name, i = "b", 1
		}
		if _, err := b.Apply(p, []*Target{target(name, i, 100, -1)}); err != nil {
			t.Errorf("pod with %v: %v", ann, err)
		}
	}

	// Native sidecars: a GPU sidecar next to a regular target is an init container's
	// whole GPU; a regular container's next to a sidecar target is a neighbour's; a
	// sidecar target asks for one GPU at most.
	always := corev1.ContainerRestartPolicyAlways
	sidecarPod := func(regular corev1.Container, n int64) *corev1.Pod {
		side := gpuContainer("side", n)
		side.RestartPolicy = &always
		p := podOf(regular)
		p.Spec.InitContainers = []corev1.Container{side}
		return p
	}
	sideTarget := func() *Target { t := target("side", 0, 100, -1); t.Init = true; return t }
	_, err = b.Apply(sidecarPod(gpuContainer("a", 1), 1), []*Target{target("a", 0, 100, -1)})
	wantUnsafe(t, err, UnsafeInitContainerGPU)
	_, err = b.Apply(sidecarPod(gpuContainer("a", 1), 1), []*Target{sideTarget()})
	wantUnsafe(t, err, UnsafeWholeGPUNeighbour)
	_, err = b.Apply(sidecarPod(corev1.Container{Name: "a"}, 2), []*Target{sideTarget()})
	wantUnsafe(t, err, UnsafeMultiGPU)

	// Second container gets the fraction: named by annotation; sidecar untouched; queue set.
	p = podOf(corev1.Container{Name: "proxy"}, gpuContainer("model", 1))
	if _, err := b.Apply(p, []*Target{target("model", 1, 2048, -1)}); err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations["gpu-fraction-container-name"]; got != "model" {
		t.Errorf("gpu-fraction-container-name = %q, want model", got)
	}
	if p.Labels["kai.scheduler/queue"] != "team-a" {
		t.Errorf("queue label = %q", p.Labels["kai.scheduler/queue"])
	}
	// An existing queue label is kept.
	p = podOf(gpuContainer("a", 1))
	p.Labels["kai.scheduler/queue"] = "mine"
	if _, err := b.Apply(p, []*Target{target("a", 0, 100, -1)}); err != nil {
		t.Fatal(err)
	}
	if p.Labels["kai.scheduler/queue"] != "mine" {
		t.Error("existing queue label overwritten")
	}
}

func TestKAINVFractions(t *testing.T) {
	b := backend(t, Config{}, gpufracv1.BackendKAINVFractions)
	p := podOf(corev1.Container{Name: "proxy"}, gpuContainer("model", 1))
	p.Annotations = map[string]string{
		"gpu-memory": "100", // legacy annotation, removed
		"nvidia.com/container.old.gpu-memory.request": "1Gi", // stale key of another container
	}
	tg := target("model", 1, 4096, 500)
	tg.UpperMemoryBytes = 6000 * MiB
	if _, err := b.Apply(p, []*Target{tg}); err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations["nvidia.com/container.model.gpu-memory.request"]; got != "4Gi" {
		t.Errorf("request = %q, want 4Gi", got)
	}
	if got := p.Annotations["nvidia.com/container.model.gpu-memory.limit"]; got != "6000Mi" {
		t.Errorf("limit = %q, want 6000Mi (upper bound)", got)
	}
	for _, k := range []string{"gpu-memory", "nvidia.com/container.old.gpu-memory.request"} {
		if _, ok := p.Annotations[k]; ok {
			t.Errorf("%s kept", k)
		}
	}
	if _, ok := p.Spec.Containers[1].Resources.Limits["nvidia.com/gpu"]; ok {
		t.Error("nvidia.com/gpu kept")
	}
	if p.Spec.SchedulerName != "kai-scheduler" || p.Annotations["gpu-fraction-container-name"] != "model" {
		t.Errorf("scheduler %q, container annotation %q", p.Spec.SchedulerName, p.Annotations["gpu-fraction-container-name"])
	}
	if tg.WrittenComputeMilli != -1 {
		t.Error("compute recorded")
	}

	// Limit = target; an upper bound above one GPU is capped.
	b2 := backend(t, Config{NVFractions: NVFractionsConfig{Limit: NVFractionsLimitTarget}}, gpufracv1.BackendKAINVFractions)
	p = podOf(gpuContainer("m", 1))
	tg = target("m", 0, 1000, -1)
	tg.UpperMemoryBytes = 2000 * MiB
	if _, err := b2.Apply(p, []*Target{tg}); err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations["nvidia.com/container.m.gpu-memory.limit"]; got != "1000Mi" {
		t.Errorf("limit = %q, want the request 1000Mi", got)
	}
	p = podOf(gpuContainer("m", 1))
	tg = target("m", 0, 1000, -1)
	tg.UpperMemoryBytes = 100 << 30
	if _, err := b.Apply(p, []*Target{tg}); err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations["nvidia.com/container.m.gpu-memory.limit"]; got != "80Gi" {
		t.Errorf("limit = %q, want one GPU 80Gi", got)
	}

	// Container names too long for the key are unsafe; so are two containers.
	long := strings.Repeat("x", 40)
	_, err := b.Apply(podOf(gpuContainer(long, 1)), []*Target{target(long, 0, 100, -1)})
	wantUnsafe(t, err, UnsafeAnnotationKey)
	_, err = b.Apply(podOf(gpuContainer("a", 1), gpuContainer("b", 1)), []*Target{target("a", 0, 100, -1), target("b", 1, 100, -1)})
	wantUnsafe(t, err, UnsafeMultiContainer)
}

func TestMPS(t *testing.T) {
	cfg := Config{MPS: MPSConfig{ReplicaMemoryBytes: 10 << 30}}
	b := backend(t, cfg, gpufracv1.BackendMPS)
	main := gpuContainer("main", 1)
	main.Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "x"}}}}
	p := podOf(main, gpuContainer("big", 1), corev1.Container{Name: "log"})
	tm := target("main", 0, 4096, 250)
	tb := target("big", 1, 20<<10, 1000)
	tl := target("log", 2, 100, 100)
	w, err := b.Apply(p, []*Target{tm, tb, tl})
	if err != nil {
		t.Fatal(err)
	}
	c := &p.Spec.Containers[0]
	if v, _ := env(c, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); v != "25" {
		t.Errorf("thread percentage = %q", v)
	}
	if c.Env[1].ValueFrom != nil || c.Env[1].Name != "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" {
		t.Error("existing entry not replaced in place")
	}
	if v, _ := env(c, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); v != "0=4096M" {
		t.Errorf("pinned limit = %q", v)
	}
	if v, _ := env(&p.Spec.Containers[1], "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); v != "0=10240M" {
		t.Errorf("big pinned limit = %q, want the replica share 0=10240M", v)
	}
	if tb.WrittenMemoryBytes != 10<<30 {
		t.Errorf("big written memory %d, want the share", tb.WrittenMemoryBytes)
	}
	if len(p.Spec.Containers[2].Env) != 0 {
		t.Error("container without GPU got MPS env")
	}
	if len(w) != 2 {
		t.Errorf("warnings %v, want the share cap and the container without GPU", w)
	}
	_, err = b.Apply(podOf(gpuContainer("a", 2)), []*Target{target("a", 0, 100, 100)})
	wantUnsafe(t, err, UnsafeMultiGPU)

	// Device and variable names are configurable.
	b = backend(t, Config{MPS: MPSConfig{Device: "1", PinnedMemoryEnv: "MY_LIMIT"}}, gpufracv1.BackendMPS)
	p = podOf(gpuContainer("a", 1))
	if _, err := b.Apply(p, []*Target{target("a", 0, 512, -1)}); err != nil {
		t.Fatal(err)
	}
	if v, _ := env(&p.Spec.Containers[0], "MY_LIMIT"); v != "1=512M" {
		t.Errorf("MY_LIMIT = %q", v)
	}
}

// TestMPSReadUnits: a CUDA_MPS_PINNED_DEVICE_MEM_LIMIT a pod carries without a record
// (set by hand before gpufrac, or while the webhook was down) is read in every unit the
// MPS client takes, K, M, G or T (binary multiples, B optional, any case), not only the
// webhook's own "<MiB>M": read as absent, the updater never compares the pod's memory,
// so one running out of memory at its own limit is never grown. A value in no such unit
// is absent; the configured device's entry counts.
func TestMPSReadUnits(t *testing.T) {
	b := backend(t, Config{}, gpufracv1.BackendMPS)
	for v, want := range map[string]int64{
		"0=16G": 16 << 30, "0=1G": 1 << 30, "0=1g": 1 << 30, "0=2GB": 2 << 30, "0=512MB": 512 * MiB,
		"0=1536M": 1536 * MiB, "0=1536m": 1536 * MiB, "0=1536": 1536 * MiB, "0=524288K": 512 * MiB,
		"0=1T": 1 << 40, "1=512MB,0=3G": 3 << 30,
		"0=1.5G": -1, "0=G": -1, "0=-1G": -1, "0=4X": -1, "1=4G": -1,
	} {
		c := gpuContainer("a", 1)
		c.Env = []corev1.EnvVar{{Name: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", Value: v}}
		got, ok := b.Read(podOf(c))["a"]
		if want < 0 {
			if ok {
				t.Errorf("%q: read %+v, want absent", v, got)
			}
			continue
		}
		if got.Memory != want {
			t.Errorf("%q: read %d bytes (found %v), want %d", v, got.Memory, ok, want)
		}
	}
}

// TestAnnotationsBackend: the limit and compute keys, pod totals and per container
// (placed by the limit: --annotation-memory-request=none; the request is
// TestAnnotationsMemoryRequest's).
func TestAnnotationsBackend(t *testing.T) {
	b := backend(t, Config{Annotations: AnnotationsConfig{MemoryRequest: AnnotationsMemoryRequestNone}}, gpufracv1.BackendAnnotations)
	long := strings.Repeat("y", 42)
	p := podOf(gpuContainer("a", 1), gpuContainer("b", 1), gpuContainer(long, 1))
	w, err := b.Apply(p, []*Target{target("a", 0, 1024, 250), target("b", 1, 2049, 100), target(long, 2, 0, 50)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"gpufrac.io/gpu-memory":              "3073Mi",
		"gpufrac.io/gpu-compute":             "400m",
		"gpufrac.io/container.a.gpu-memory":  "1Gi",
		"gpufrac.io/container.a.gpu-compute": "250m",
		"gpufrac.io/container.b.gpu-memory":  "2049Mi",
		"gpufrac.io/container.b.gpu-compute": "100m",
	}
	for k, v := range want {
		if p.Annotations[k] != v {
			t.Errorf("%s = %q, want %q", k, p.Annotations[k], v)
		}
	}
	if len(p.Annotations) != len(want) {
		t.Errorf("annotations %v", p.Annotations)
	}
	if len(w) != 1 {
		t.Errorf("warnings %v, want one for the long name", w)
	}
	if len(p.Spec.Containers[0].Resources.Limits) != 1 {
		t.Error("resources changed")
	}
}

// TestAnnotationsMemoryRequest: with --annotation-memory-request=observed-peak the
// annotations backend writes the observed peak (plus overheads, rounded up) as the
// memory request where it is below the target, else the target; the memory key stays
// the target (the limit), which is what Read returns and what Apply records as written.
// A container name too long for the request key (35–41 characters) keeps its limit key
// and counts in the pod total. It is the default; with none no request is written; an
// unknown value is invalid.
func TestAnnotationsMemoryRequest(t *testing.T) {
	if got := (Config{}).WithDefaults().Annotations.MemoryRequest; got != AnnotationsMemoryRequestObservedPeak {
		t.Errorf("default memory request %q, want %q", got, AnnotationsMemoryRequestObservedPeak)
	}
	b := backend(t, Config{}, gpufracv1.BackendAnnotations)
	mid := strings.Repeat("m", 35)
	p := podOf(gpuContainer("a", 1), gpuContainer("b", 1), gpuContainer(mid, 1))
	a, c, m := target("a", 0, 4096, -1), target("b", 1, 2048, -1), target(mid, 2, 1024, -1)
	a.PeakMemoryBytes = 3000*MiB + 1 // below the target: the request, rounded up
	c.PeakMemoryBytes = 5000 * MiB   // above the target (a rollback floor): the target
	m.PeakMemoryBytes = 512 * MiB
	if _, err := b.Apply(p, []*Target{a, c, m}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"gpufrac.io/gpu-memory":                       "7Gi",
		"gpufrac.io/gpu-memory-request":               "5561Mi",
		"gpufrac.io/container.a.gpu-memory":           "4Gi",
		"gpufrac.io/container.a.gpu-memory-request":   "3001Mi",
		"gpufrac.io/container.b.gpu-memory":           "2Gi",
		"gpufrac.io/container.b.gpu-memory-request":   "2Gi",
		"gpufrac.io/container." + mid + ".gpu-memory": "1Gi",
	}
	for k, v := range want {
		if p.Annotations[k] != v {
			t.Errorf("%s = %q, want %q", k, p.Annotations[k], v)
		}
	}
	if len(p.Annotations) != len(want) {
		t.Errorf("annotations %v", p.Annotations)
	}
	if got := b.Read(p)["a"].Memory; got != 4096*MiB || a.WrittenMemoryBytes != 4096*MiB {
		t.Errorf("read back %d, recorded %d; want the limit 4096Mi", got, a.WrittenMemoryBytes)
	}

	off := backend(t, Config{Annotations: AnnotationsConfig{MemoryRequest: AnnotationsMemoryRequestNone}}, gpufracv1.BackendAnnotations)
	p = podOf(gpuContainer("a", 1))
	a = target("a", 0, 4096, -1)
	a.PeakMemoryBytes = 3000 * MiB
	if _, err := off.Apply(p, []*Target{a}); err != nil {
		t.Fatal(err)
	}
	if len(p.Annotations) != 2 || p.Annotations["gpufrac.io/gpu-memory"] != "4Gi" {
		t.Errorf("none: annotations %v, want the limit keys only", p.Annotations)
	}
	if err := (Config{Annotations: AnnotationsConfig{MemoryRequest: "p50"}}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), `--annotation-memory-request "p50"`) {
		t.Errorf("Validate = %v", err)
	}
}

func TestRounding(t *testing.T) {
	for _, tc := range []struct{ in, want int64 }{{0, 1}, {1, 1}, {MiB, 1}, {MiB + 1, 2}} {
		if got := ceilMiB(tc.in); got != tc.want {
			t.Errorf("ceilMiB(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want int64 }{{0, 1}, {1, 1}, {10, 1}, {11, 2}, {999, 100}, {1000, 100}, {5000, 100}} {
		if got := ceilPercent(tc.in); got != tc.want {
			t.Errorf("ceilPercent(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestKAIReservedMemory: the gpu-fraction is a share of the GPU's usable memory (total
// less the per-GPU reserve), so 5980 MiB on a 15 GiB GPU is 0.39 without a reserve and
// 0.41 with a 512 MiB one (5980 / 14848 = 0.403, rounded up), and the memory recorded as
// written is that share of the usable memory, never less than the recommendation.
func TestKAIReservedMemory(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mode       string
		reserved   int64
		memMiB     int64
		want       string // annotation value
		unsafe     string
		annotation string
	}{
		{"fraction, no reserve: of total", KAIModeFraction, 0, 5980, "0.39", "", "gpu-fraction"},
		{"fraction, 512Mi reserved: of usable", KAIModeFraction, 512 * MiB, 5980, "0.41", "", "gpu-fraction"},
		{"fraction, all usable memory: unsafe", KAIModeFraction, 512 * MiB, 15<<10 - 512, "", UnsafeWholeGPU, ""},
		{"memory mode, below usable", KAIModeMemory, 512 * MiB, 14000, "14000", "", "gpu-memory"},
		{"memory mode, above usable: unsafe", KAIModeMemory, 512 * MiB, 15<<10 - 256, "", UnsafeWholeGPU, ""},
		{"memory mode, same size without a reserve", KAIModeMemory, 0, 15<<10 - 256, "15104", "", "gpu-memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{GPUMemoryBytes: 15 << 30, KAI: KAIConfig{Mode: tc.mode, ReservedMemoryBytes: tc.reserved}}.WithDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			pod := podOf(gpuContainer("main", 1))
			tg := target("main", 0, tc.memMiB, -1)
			_, err := backend(t, cfg, gpufracv1.BackendKAI).Apply(pod, []*Target{tg})
			if tc.unsafe != "" {
				wantUnsafe(t, err, tc.unsafe)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pod.Annotations[tc.annotation]; got != tc.want {
				t.Errorf("%s = %q, want %q", tc.annotation, got, tc.want)
			}
			if tg.WrittenMemoryBytes < tc.memMiB*MiB {
				t.Errorf("written memory %d bytes < recommended %d MiB", tg.WrittenMemoryBytes, tc.memMiB)
			}
			if tc.mode == KAIModeFraction && tg.WrittenMemoryBytes > cfg.UsableGPUMemoryBytes() {
				t.Errorf("written memory %d bytes above the usable %d", tg.WrittenMemoryBytes, cfg.UsableGPUMemoryBytes())
			}
		})
	}
}

// The per-GPU backends leave a container without a GPU alone with a warning naming what
// it lacks, write the others, and refuse a container with more than one GPU.
func TestPerGPUContainers(t *testing.T) {
	for _, tc := range []struct {
		bt   gpufracv1.BackendType
		warn string
	}{
		{gpufracv1.BackendHAMi, "gpufrac: container side asks for no nvidia.com/gpu; hami fraction not written for it"},
		{gpufracv1.BackendMPS, "gpufrac: container side asks for no nvidia.com/* resource; mps limits not written for it"},
	} {
		t.Run(string(tc.bt), func(t *testing.T) {
			b := backend(t, Config{}, tc.bt)
			pod := podOf(gpuContainer("main", 1), corev1.Container{Name: "side", Image: "img"})
			main, side := target("main", 0, 1024, 250), target("side", 1, 1024, 250)
			warnings, err := b.Apply(pod, []*Target{main, side})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(warnings, []string{tc.warn}) {
				t.Errorf("warnings %q, want %q", warnings, tc.warn)
			}
			if main.WrittenMemoryBytes != 1024*MiB || main.WrittenComputeMilli != 250 || side.Wrote() {
				t.Errorf("main wrote %d bytes %dm, side wrote %v; want 1Gi 250m and nothing", main.WrittenMemoryBytes, main.WrittenComputeMilli, side.Wrote())
			}
			// nvidia.com/gpu: 0 (a chart's way to turn the GPU off) asks for none either.
			zero := target("main", 0, 1024, 250)
			warnings, err = b.Apply(podOf(gpuContainer("main", 0)), []*Target{zero})
			if err != nil || len(warnings) != 1 || zero.Wrote() {
				t.Errorf("nvidia.com/gpu 0: warnings %q, err %v, wrote %v; want one warning and nothing written", warnings, err, zero.Wrote())
			}
			_, err = b.Apply(podOf(gpuContainer("main", 1), gpuContainer("two", 2)), []*Target{target("main", 0, 1024, 250), target("two", 1, 1024, 250)})
			wantUnsafe(t, err, UnsafeMultiGPU)
			if !strings.Contains(err.Error(), "container two asks for 2 nvidia.com/gpu; gpufrac writes fractions of one GPU only") {
				t.Errorf("unsafe message %q", err)
			}
		})
	}
}

// TestNVFractionsRequestLimit: the request and limit of every source combination, in
// MiB rounded up, with the limit never below the request or the target and never above
// one GPU; observed-peak applies only to a known peak below the target.
func TestNVFractionsRequestLimit(t *testing.T) {
	const gpu = 80 << 30
	peak := NVFractionsConfig{Request: NVFractionsRequestObservedPeak, Limit: NVFractionsLimitUpperBound}
	for _, tc := range []struct {
		name               string
		cfg                NVFractionsConfig
		mem, upper, peakB  int64
		wantReq, wantLimit int64
	}{
		{"target, upper bound", NVFractionsConfig{Request: NVFractionsRequestTarget, Limit: NVFractionsLimitUpperBound}, 4096 * MiB, 6000 * MiB, 3000 * MiB, 4096, 6000},
		{"target, no upper bound", NVFractionsConfig{Request: NVFractionsRequestTarget, Limit: NVFractionsLimitUpperBound}, 4096 * MiB, 0, 0, 4096, 4096},
		{"limit target", NVFractionsConfig{Request: NVFractionsRequestTarget, Limit: NVFractionsLimitTarget}, 4096 * MiB, 6000 * MiB, 0, 4096, 4096},
		{"observed peak below the target", peak, 4096 * MiB, 6000 * MiB, 3000*MiB + 1, 3001, 6000},
		{"observed peak, upper bound below the target: limit is the target", peak, 4096 * MiB, 3500 * MiB, 3000 * MiB, 3000, 4096},
		{"observed peak above the target (a rollback floor): the target", peak, 4096 * MiB, 6000 * MiB, 5000 * MiB, 4096, 6000},
		{"observed peak unknown: the target", peak, 4096 * MiB, 6000 * MiB, 0, 4096, 6000},
		{"upper bound above one GPU: capped", peak, 40 << 30, 100 << 30, 30 << 30, 30 << 10, 80 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, limit := tc.cfg.RequestLimit(tc.mem, tc.upper, tc.peakB, gpu)
			if req != tc.wantReq || limit != tc.wantLimit {
				t.Errorf("RequestLimit = %d, %d MiB; want %d, %d", req, limit, tc.wantReq, tc.wantLimit)
			}
		})
	}
	// The webhook writes what RequestLimit says, and records the request as written.
	b := backend(t, Config{NVFractions: peak}, gpufracv1.BackendKAINVFractions)
	p := podOf(gpuContainer("m", 1))
	tg := target("m", 0, 4096, -1)
	tg.UpperMemoryBytes, tg.PeakMemoryBytes = 6000*MiB, 3000*MiB
	if _, err := b.Apply(p, []*Target{tg}); err != nil {
		t.Fatal(err)
	}
	if r, l := p.Annotations["nvidia.com/container.m.gpu-memory.request"], p.Annotations["nvidia.com/container.m.gpu-memory.limit"]; r != "3000Mi" || l != "6000Mi" {
		t.Errorf("request %q limit %q, want 3000Mi 6000Mi", r, l)
	}
	if tg.WrittenMemoryBytes != 3000*MiB || b.Read(p)["m"].Memory != 3000*MiB {
		t.Errorf("written %d, read back %d; want the request 3000Mi", tg.WrittenMemoryBytes, b.Read(p)["m"].Memory)
	}
	// observed-peak without the upper-bound limit would lose the headroom.
	bad := Config{NVFractions: NVFractionsConfig{Request: NVFractionsRequestObservedPeak, Limit: NVFractionsLimitTarget}}.WithDefaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--nvfractions-request observed-peak needs --nvfractions-limit upper-bound") {
		t.Errorf("Validate = %v", err)
	}
	if err := (Config{NVFractions: NVFractionsConfig{Request: "p50"}}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), `nvfractions-request "p50"`) {
		t.Errorf("Validate = %v", err)
	}
}

// LargestFraction is exactly the boundary of each backend's Apply: that much memory is
// written as a fraction, one byte more makes the pod whole-GPU (admitted unchanged).
func TestLargestFraction(t *testing.T) {
	for _, tc := range []struct {
		name string
		bt   gpufracv1.BackendType
		cfg  Config
	}{
		{"kai gpu-memory", gpufracv1.BackendKAI, Config{GPUMemoryBytes: 16 << 30, KAI: KAIConfig{ReservedMemoryBytes: 1 << 30}}},
		{"kai gpu-fraction", gpufracv1.BackendKAI, Config{GPUMemoryBytes: 15 << 30, KAI: KAIConfig{Mode: KAIModeFraction, ReservedMemoryBytes: 600 << 20}}},
		{"kai-nvfractions", gpufracv1.BackendKAINVFractions, Config{GPUMemoryBytes: 16 << 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := backend(t, tc.cfg.WithDefaults(), tc.bt)
			lim := LargestFraction(tc.bt, tc.cfg.WithDefaults())
			for _, m := range []int64{lim, lim + 1} {
				tg := target("main", 0, 1, -1)
				tg.MemoryBytes = m
				_, err := b.Apply(podOf(gpuContainer("main", 1)), []*Target{tg})
				if m == lim && err != nil {
					t.Errorf("%d bytes (LargestFraction): %v, want written", m, err)
				}
				if m > lim {
					wantUnsafe(t, err, UnsafeWholeGPU)
				}
			}
		})
	}
	if got := LargestFraction(gpufracv1.BackendHAMi, Config{GPUMemoryBytes: 16 << 30}); got != 16<<30 {
		t.Errorf("hami: %d, want one GPU", got)
	}
}

// TestAnnotationsTotalsCountContainersNotWritten: a pod of two GPU containers, one with
// a recommendation, the other carrying its own per-container keys (its template's, a
// user's own, a pod copied from another cluster): the pod totals are the sum of every
// container's keys as the pod ends up. Before, they were the written container's alone
// (gpufrac.io/gpu-memory 4Gi for containers holding 4Gi and 8Gi), and a cluster
// enforcing by the total took the other container's memory away.
func TestAnnotationsTotalsCountContainersNotWritten(t *testing.T) {
	for _, tc := range []struct {
		name       string
		request    string
		carried    map[string]string
		want       map[string]string
		wantWarned bool
	}{
		{"placed by the limit", AnnotationsMemoryRequestNone, map[string]string{
			"gpufrac.io/gpu-memory": "10Gi", "gpufrac.io/gpu-compute": "500m",
			"gpufrac.io/container.b.gpu-memory": "8Gi", "gpufrac.io/container.b.gpu-compute": "300m",
		}, map[string]string{"gpufrac.io/gpu-memory": "12Gi", "gpufrac.io/gpu-compute": "500m"}, false},
		{"memory request", AnnotationsMemoryRequestObservedPeak, map[string]string{
			"gpufrac.io/container.b.gpu-memory": "8Gi", "gpufrac.io/container.b.gpu-memory-request": "6Gi",
		}, map[string]string{"gpufrac.io/gpu-memory": "12Gi", "gpufrac.io/gpu-memory-request": "10Gi", "gpufrac.io/gpu-compute": "200m"}, false},
		{"request of a container placed by its limit", AnnotationsMemoryRequestObservedPeak, map[string]string{
			"gpufrac.io/container.b.gpu-memory": "8Gi",
		}, map[string]string{"gpufrac.io/gpu-memory": "12Gi", "gpufrac.io/gpu-memory-request": "12Gi"}, false},
		{"no quantity", AnnotationsMemoryRequestNone, map[string]string{
			"gpufrac.io/container.b.gpu-memory": "lots",
		}, map[string]string{"gpufrac.io/gpu-memory": "4Gi", "gpufrac.io/container.b.gpu-memory": "lots"}, true},
		{"nothing carried", AnnotationsMemoryRequestNone, nil, map[string]string{"gpufrac.io/gpu-memory": "4Gi", "gpufrac.io/gpu-compute": "200m"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := backend(t, Config{Annotations: AnnotationsConfig{MemoryRequest: tc.request}}, gpufracv1.BackendAnnotations)
			p := podOf(gpuContainer("a", 1), gpuContainer("b", 1), corev1.Container{Name: "log"})
			p.Annotations = tc.carried
			warnings, err := b.Apply(p, []*Target{target("a", 0, 4096, 200)})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if p.Annotations[k] != v {
					t.Errorf("%s = %q, want %q (%v)", k, p.Annotations[k], v, p.Annotations)
				}
			}
			if (len(warnings) > 0) != tc.wantWarned {
				t.Errorf("warnings %q, want some: %v", warnings, tc.wantWarned)
			}
		})
	}
}

// TestValidateNamesThePodsCarry: a name a backend writes into every pod it patches that
// the API server refuses (a HAMi resource without a domain or in kubernetes.io, an MPS
// variable with a space, a KAI scheduler in capitals, an annotation or label key or a
// queue that is none) is a startup error naming the flag; before, the webhook started
// and every pod it patched was rejected by the API server after admission, whatever the
// failure policy. Renamed names that are valid are accepted.
func TestValidateNamesThePodsCarry(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *Config)
		want string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"renamed, valid", func(c *Config) {
			c.HAMi.MemoryResource, c.HAMi.CoresResource = "example.com/vgpu-memory", "example.com/vgpu-cores"
			c.MPS.ThreadPercentageEnv, c.KAI.SchedulerName, c.KAI.MemoryAnnotation = "MY_MPS_THREADS", "kai-scheduler-2", "kai.example.com/gpu-memory"
			c.KAI.Queue = "team-a"
		}, ""},
		{"hami resource without a domain", func(c *Config) { c.HAMi.MemoryResource = "gpumem" }, `--hami-memory-resource "gpumem"`},
		{"hami resource in kubernetes.io", func(c *Config) { c.HAMi.CoresResource = "kubernetes.io/gpucores" }, `--hami-cores-resource "kubernetes.io/gpucores"`},
		{"hami resource not qualified", func(c *Config) { c.HAMi.CoresResource = "nvidia.com/gpu cores" }, `--hami-cores-resource "nvidia.com/gpu cores"`},
		{"mps variable with a space", func(c *Config) { c.MPS.PinnedMemoryEnv = "CUDA MPS LIMIT" }, `--mps-pinned-memory-env "CUDA MPS LIMIT"`},
		{"mps variable with =", func(c *Config) { c.MPS.ThreadPercentageEnv = "A=B" }, `--mps-thread-percentage-env "A=B"`},
		{"kai scheduler in capitals", func(c *Config) { c.KAI.SchedulerName = "KAI-Scheduler" }, `--kai-scheduler-name "KAI-Scheduler"`},
		{"kai annotation key", func(c *Config) { c.KAI.FractionAnnotation = "gpu fraction" }, `--kai-fraction-annotation "gpu fraction"`},
		{"kai queue", func(c *Config) { c.KAI.Queue = "team a" }, `--kai-queue "team a"`},
		{"kai queue label", func(c *Config) { c.KAI.Queue, c.KAI.QueueLabel = "a", "kai/scheduler/queue" }, `--kai-queue-label "kai/scheduler/queue"`},
		{"annotations key", func(c *Config) { c.Annotations.ComputeKey = "gpufrac.io/gpu compute" }, `--annotation-compute-key "gpufrac.io/gpu compute"`},
	} {
		c := Config{}.WithDefaults()
		tc.set(&c)
		err := c.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want valid", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
