package backend

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// The opaque parameters of NVIDIA's DRA driver for GPUs (github.com/NVIDIA/k8s-dra-driver-gpu,
// api/nvidia.com/resource/v1beta1, sharing.go; the GpuConfig sharing settings are read
// by the driver from v25.8.0 on, behind its feature gates MPSSupport and
// TimeSlicingSettings, both alpha and off by default; docs/admission.md).
const (
	// GpuConfigAPIVersion is the apiVersion of the driver's opaque GpuConfig.
	GpuConfigAPIVersion = "resource.nvidia.com/v1beta1"
	// GpuConfigKind is the kind of the driver's opaque GPU configuration.
	GpuConfigKind = "GpuConfig"
	// GpuSharingMPS is the driver's MPS sharing strategy (MpsStrategy).
	GpuSharingMPS = "MPS"
	// GpuSharingTimeSlicing is the driver's time-slicing strategy (TimeSlicingStrategy).
	GpuSharingTimeSlicing = "TimeSlicing"
)

// TimeSliceIntervals are the driver's time-slice intervals (TimeSliceInterval).
var TimeSliceIntervals = []string{"Default", "Short", "Medium", "Long"}

// Labels and annotations gpufrac puts on the ResourceClaimTemplates it writes.
const (
	// LabelManagedBy (app.kubernetes.io/managed-by=gpufrac) marks a template gpufrac wrote.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationSourceTemplate names the workload's own template a gpufrac template was
	// derived from; a pod already on a gpufrac template is re-derived from that source.
	AnnotationSourceTemplate = "gpufrac.io/source-claim-template"
)

// gpuConfig is the driver's GpuConfig (only the fields gpufrac writes and reads).
type gpuConfig struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Sharing    *gpuSharing `json:"sharing,omitempty"`
}

type gpuSharing struct {
	Strategy          string             `json:"strategy"`
	TimeSlicingConfig *timeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *mpsConfig         `json:"mpsConfig,omitempty"`
}

type timeSlicingConfig struct {
	Interval string `json:"interval,omitempty"`
}

type mpsConfig struct {
	// DefaultActiveThreadPercentage is percent, 1–100.
	DefaultActiveThreadPercentage *int64 `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit is bytes (the driver hands the daemon whole MiB).
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
}

// ClaimTemplates reads and writes ResourceClaimTemplates for the dra backend.
type ClaimTemplates interface {
	// Get returns the template, or an error (NotFound included).
	Get(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaimTemplate, error)
	// Create creates the template; AlreadyExists when it exists.
	Create(ctx context.Context, t *resourcev1.ResourceClaimTemplate) error
}

// ClientClaimTemplates is ClaimTemplates over controller-runtime: Reader should read the
// API server directly (a manager's GetAPIReader), so no informer over every template of
// the cluster is needed; Writer creates (nil: the backend reads only). DryRun makes
// creates server-side dry runs.
type ClientClaimTemplates struct {
	Reader client.Reader
	Writer client.Writer
	DryRun bool
}

// Get implements ClaimTemplates.
func (c ClientClaimTemplates) Get(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaimTemplate, error) {
	t := &resourcev1.ResourceClaimTemplate{}
	return t, c.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, t)
}

// Create implements ClaimTemplates.
func (c ClientClaimTemplates) Create(ctx context.Context, t *resourcev1.ResourceClaimTemplate) error {
	if c.Writer == nil {
		return errors.New("no client to create ResourceClaimTemplates")
	}
	var opts []client.CreateOption
	if c.DryRun {
		opts = append(opts, client.DryRunAll)
	}
	return c.Writer.Create(ctx, t, opts...)
}

// UnsafeDRA: the dra backend could not read or write a ResourceClaimTemplate (no client,
// an API error, a template of the same name with other content).
const UnsafeDRA = "dra-claim-template"

// draBackend writes a fraction for pods on Dynamic Resource Allocation (resource.k8s.io/v1)
// with NVIDIA's DRA driver. A target container's GPU claim is a pod claim
// (spec.resourceClaims) from a ResourceClaimTemplate with a request for one of
// DRAConfig.DeviceClasses. gpufrac derives from that template a new one in the pod's
// namespace, named "<source>-gpufrac-<hash of its spec>" (the same recommendation
// reuses the same template), whose GpuConfig for the GPU requests is:
//   - MPS (the recommended sharing mode MPS, or none): defaultPinnedDeviceMemoryLimit,
//     whole MiB rounded up, and defaultActiveThreadPercentage, whole percent rounded up;
//     containers sharing one claim get the largest of their targets (the limits are per
//     MPS client);
//   - TimeSlicing (every container on the claim recommended TimeSlicing): the configured
//     interval; no limit is written, so nothing is recorded as written.
//
// A claim of containers that are all recommended Exclusive is left alone. Any other
// GpuConfig of the driver for those requests is replaced. The pod's claim then names the
// new template (containers keep their resources.claims). A container without a GPU claim
// from a template (no claim, another device class, a shared ResourceClaim) is skipped with
// a warning; an API error makes the pod unsafe (admitted unchanged).
type draBackend struct{ cfg Config }

// Type implements Codec.
func (b *draBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendDRA }

// WritesCompute implements Codec: defaultActiveThreadPercentage.
func (b *draBackend) WritesCompute() bool { return true }

// DryRun implements DryRunner: templates are created with a server-side dry run.
func (b *draBackend) DryRun() Codec {
	c := *b
	if t, ok := c.cfg.DRA.Templates.(ClientClaimTemplates); ok {
		t.DryRun = true
		c.cfg.DRA.Templates = t
	}
	return &c
}

// draClaim is one GPU claim of a pod and the targets of the containers that use it.
type draClaim struct {
	index   int // in pod.spec.resourceClaims
	source  *resourcev1.ResourceClaimTemplate
	targets []*Target
}

// Apply implements Codec.
func (b *draBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	if b.cfg.DRA.Templates == nil {
		return nil, Unsafe(UnsafeDRA, "no ResourceClaimTemplate client configured")
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.DRA.Timeout)
	defer cancel()
	claims, warnings, err := b.gpuClaims(ctx, pod, targets)
	if err != nil {
		return nil, err
	}
	for _, cl := range claims {
		w, err := b.applyClaim(ctx, pod, cl)
		if err != nil {
			return nil, err
		}
		warnings = append(warnings, w...)
	}
	return warnings, nil
}

// gpuClaims groups the targets by the GPU claim their container uses, in the order of
// pod.spec.resourceClaims.
func (b *draBackend) gpuClaims(ctx context.Context, pod *corev1.Pod, targets []*Target) ([]*draClaim, []string, error) {
	byName := map[string]*draClaim{}
	var order []string
	var warnings []string
	for _, t := range targets {
		c := t.container(pod)
		found := false
		for _, rc := range c.Resources.Claims {
			i := slices.IndexFunc(pod.Spec.ResourceClaims, func(p corev1.PodResourceClaim) bool { return p.Name == rc.Name })
			if i < 0 || pod.Spec.ResourceClaims[i].ResourceClaimTemplateName == nil {
				continue
			}
			cl, ok := byName[rc.Name]
			if !ok {
				src, err := b.source(ctx, pod.Namespace, *pod.Spec.ResourceClaims[i].ResourceClaimTemplateName)
				if err != nil {
					return nil, nil, err
				}
				if len(b.gpuRequests(src)) == 0 {
					continue
				}
				cl = &draClaim{index: i, source: src}
				byName[rc.Name] = cl
				order = append(order, rc.Name)
			} else if slices.Contains(cl.targets, t) {
				continue
			}
			cl.targets = append(cl.targets, t)
			found = true
		}
		if !found {
			warnings = append(warnings, fmt.Sprintf("gpufrac: container %s uses no claim from a ResourceClaimTemplate for device class %s; dra limits not written for it", c.Name, strings.Join(b.cfg.DRA.DeviceClasses, " or ")))
		}
	}
	out := make([]*draClaim, len(order))
	for i, n := range order {
		out[i] = byName[n]
	}
	return out, warnings, nil
}

// source returns the workload's own template behind name: name itself, or the source a
// gpufrac template names, which must be no gpufrac template itself (gpufrac derives
// from the workload's own template only, so one more hop is a template edited or
// copied with gpufrac's label and annotation: a template naming itself, as one re-created
// from a gpufrac template's YAML under its source's name, or two naming each other).
// An API error or such a chain is an UnsafeError.
func (b *draBackend) source(ctx context.Context, ns, name string) (*resourcev1.ResourceClaimTemplate, error) {
	t, err := b.template(ctx, ns, name)
	if err != nil || !derived(t) {
		return t, err
	}
	s := t.Annotations[AnnotationSourceTemplate]
	src, err := b.template(ctx, ns, s)
	if err != nil {
		return nil, err
	}
	if derived(src) {
		return nil, Unsafe(UnsafeDRA, "ResourceClaimTemplate %s/%s (%s=gpufrac) names %s as its source (%s), itself a gpufrac template naming %s: the workload's own template is not known; remove the label and annotation from the workload's template",
			ns, name, LabelManagedBy, s, AnnotationSourceTemplate, src.Annotations[AnnotationSourceTemplate])
	}
	return src, nil
}

// template reads one ResourceClaimTemplate; an API error is an UnsafeError.
func (b *draBackend) template(ctx context.Context, ns, name string) (*resourcev1.ResourceClaimTemplate, error) {
	t, err := b.cfg.DRA.Templates.Get(ctx, ns, name)
	if err != nil {
		return nil, Unsafe(UnsafeDRA, "reading ResourceClaimTemplate %s/%s: %v", ns, name, err)
	}
	return t, nil
}

// derived reports whether t is a gpufrac template: labelled managed by gpufrac and
// naming its source.
func derived(t *resourcev1.ResourceClaimTemplate) bool {
	return t.Annotations[AnnotationSourceTemplate] != "" && t.Labels[LabelManagedBy] == "gpufrac"
}

// gpuRequests returns the names of the template's requests for one of the configured
// device classes (a request with firstAvailable counts when one of its subrequests does).
func (b *draBackend) gpuRequests(t *resourcev1.ResourceClaimTemplate) []string {
	var out []string
	for _, r := range t.Spec.Spec.Devices.Requests {
		gpu := r.Exactly != nil && slices.Contains(b.cfg.DRA.DeviceClasses, r.Exactly.DeviceClassName)
		for _, s := range r.FirstAvailable {
			gpu = gpu || slices.Contains(b.cfg.DRA.DeviceClasses, s.DeviceClassName)
		}
		if gpu {
			out = append(out, r.Name)
		}
	}
	return out
}

// sharingOf is the strategy for the containers of one claim: MPS when one of them is
// recommended MPS (or no mode), else TimeSlicing when one is, else "" (all Exclusive).
func sharingOf(targets []*Target) string {
	s := ""
	for _, t := range targets {
		switch t.SharingMode {
		case gpufracv1.SharingModeMPS, "":
			return GpuSharingMPS
		case gpufracv1.SharingModeTimeSlicing:
			s = GpuSharingTimeSlicing
		}
	}
	return s
}

// applyClaim writes the template of one claim and points the pod's claim at it.
func (b *draBackend) applyClaim(ctx context.Context, pod *corev1.Pod, cl *draClaim) ([]string, error) {
	sharing := &gpuSharing{Strategy: sharingOf(cl.targets)}
	var mib, pct int64
	switch sharing.Strategy {
	case "":
		return []string{fmt.Sprintf("gpufrac: claim %s: every container on it is recommended Exclusive; its template is left alone", pod.Spec.ResourceClaims[cl.index].Name)}, nil
	case GpuSharingTimeSlicing:
		sharing.TimeSlicingConfig = &timeSlicingConfig{Interval: b.cfg.DRA.TimeSliceInterval}
	case GpuSharingMPS:
		for _, t := range cl.targets {
			if t.HasMemory {
				mib = max(mib, ceilMiB(t.MemoryBytes))
			}
			if t.HasCompute {
				pct = max(pct, ceilPercent(t.ComputeMilli))
			}
		}
		sharing.MpsConfig = &mpsConfig{}
		if mib > 0 {
			sharing.MpsConfig.DefaultPinnedDeviceMemoryLimit = mibQuantity(mib)
		}
		if pct > 0 {
			sharing.MpsConfig.DefaultActiveThreadPercentage = &pct
		}
	}
	tmpl, err := b.derive(cl.source, sharing)
	if err != nil {
		return nil, err
	}
	if err := b.ensure(ctx, tmpl); err != nil {
		return nil, err
	}
	pod.Spec.ResourceClaims[cl.index].ResourceClaimTemplateName = &tmpl.Name
	for _, t := range cl.targets {
		if t.HasMemory && mib > 0 {
			t.wroteMemory(mib * MiB)
		}
		if t.HasCompute && pct > 0 {
			t.wroteCompute(pct * 10)
		}
	}
	return nil, nil
}

// derive returns the gpufrac template for src with sharing on its GPU requests.
func (b *draBackend) derive(src *resourcev1.ResourceClaimTemplate, sharing *gpuSharing) (*resourcev1.ResourceClaimTemplate, error) {
	raw, err := json.Marshal(gpuConfig{APIVersion: GpuConfigAPIVersion, Kind: GpuConfigKind, Sharing: sharing})
	if err != nil {
		return nil, Unsafe(UnsafeDRA, "encoding GpuConfig: %v", err)
	}
	reqs := b.gpuRequests(src)
	spec := *src.Spec.DeepCopy()
	var config []resourcev1.DeviceClaimConfiguration
	for _, c := range spec.Spec.Devices.Config {
		if b.isGpuConfig(c) && (len(c.Requests) == 0 || slices.ContainsFunc(c.Requests, func(r string) bool { return slices.Contains(reqs, strings.Split(r, "/")[0]) })) {
			continue // replaced below
		}
		config = append(config, c)
	}
	config = append(config, resourcev1.DeviceClaimConfiguration{
		Requests:            reqs,
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: b.cfg.DRA.Driver, Parameters: runtime.RawExtension{Raw: raw}}},
	})
	spec.Spec.Devices.Config = config
	h := fnv.New32a()
	canon, _ := json.Marshal(spec)
	h.Write(canon)
	suffix := fmt.Sprintf("-gpufrac-%08x", h.Sum32())
	base := src.Name
	if n := 253 - len(suffix); len(base) > n {
		base = strings.TrimRight(base[:n], "-.")
	}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name: base + suffix, Namespace: src.Namespace,
			Labels:      map[string]string{LabelManagedBy: "gpufrac"},
			Annotations: map[string]string{AnnotationSourceTemplate: src.Name},
		},
		Spec: spec,
	}, nil
}

// isGpuConfig reports whether c is an opaque configuration of the driver.
func (b *draBackend) isGpuConfig(c resourcev1.DeviceClaimConfiguration) bool {
	return c.Opaque != nil && c.Opaque.Driver == b.cfg.DRA.Driver
}

// ensure creates tmpl, or reuses the template of that name when its spec is the same.
func (b *draBackend) ensure(ctx context.Context, tmpl *resourcev1.ResourceClaimTemplate) error {
	err := b.cfg.DRA.Templates.Create(ctx, tmpl.DeepCopy())
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return Unsafe(UnsafeDRA, "creating ResourceClaimTemplate %s/%s: %v", tmpl.Namespace, tmpl.Name, err)
	}
	got, err := b.cfg.DRA.Templates.Get(ctx, tmpl.Namespace, tmpl.Name)
	if err != nil {
		return Unsafe(UnsafeDRA, "reading ResourceClaimTemplate %s/%s: %v", tmpl.Namespace, tmpl.Name, err)
	}
	if !equality.Semantic.DeepEqual(got.Spec.Spec, tmpl.Spec.Spec) {
		return Unsafe(UnsafeDRA, "ResourceClaimTemplate %s/%s exists with another spec; not reused", tmpl.Namespace, tmpl.Name)
	}
	return nil
}

// Read implements Codec: the MPS limits of the GpuConfig in the template of each
// container's claims (defaultPinnedDeviceMemoryLimit, bytes; defaultActiveThreadPercentage
// × 10, thousandths). A template that cannot be read gives nothing for its containers.
func (b *draBackend) Read(pod *corev1.Pod) map[string]Allocation {
	if b.cfg.DRA.Templates == nil {
		return map[string]Allocation{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.DRA.Timeout)
	defer cancel()
	perClaim := map[string]Allocation{}
	for _, p := range pod.Spec.ResourceClaims {
		if p.ResourceClaimTemplateName == nil {
			continue
		}
		if t, err := b.cfg.DRA.Templates.Get(ctx, pod.Namespace, *p.ResourceClaimTemplateName); err == nil {
			perClaim[p.Name] = b.readTemplate(t)
		}
	}
	return readEach(pod, func(c workload.PodContainer, a *Allocation) {
		for _, rc := range c.Container.Resources.Claims {
			if v, ok := perClaim[rc.Name]; ok && v.found() {
				*a = v
			}
		}
	})
}

// readTemplate returns the MPS limits of the template's GpuConfig for its GPU requests.
func (b *draBackend) readTemplate(t *resourcev1.ResourceClaimTemplate) Allocation {
	a := none
	reqs := b.gpuRequests(t)
	for _, c := range t.Spec.Spec.Devices.Config {
		if !b.isGpuConfig(c) || (len(c.Requests) > 0 && !slices.ContainsFunc(c.Requests, func(r string) bool { return slices.Contains(reqs, strings.Split(r, "/")[0]) })) {
			continue
		}
		var g gpuConfig
		if json.Unmarshal(c.Opaque.Parameters.Raw, &g) != nil || g.Kind != GpuConfigKind || g.Sharing == nil || g.Sharing.Strategy != GpuSharingMPS || g.Sharing.MpsConfig == nil {
			continue
		}
		if q := g.Sharing.MpsConfig.DefaultPinnedDeviceMemoryLimit; q != nil && q.Sign() > 0 {
			a.Memory = q.Value()
		}
		if p := g.Sharing.MpsConfig.DefaultActiveThreadPercentage; p != nil && *p > 0 {
			a.Compute = *p * 10
		}
	}
	return a
}

// DRAConfig configures the dra backend.
type DRAConfig struct {
	// DeviceClasses are the DeviceClass names of GPU requests. Default gpu.nvidia.com
	// (the class NVIDIA's driver installs).
	DeviceClasses []string
	// Driver is the DRA driver name of the opaque configuration. Default gpu.nvidia.com.
	Driver string
	// TimeSliceInterval is the driver's interval for TimeSlicing: Default, Short, Medium
	// or Long. Default "Default".
	TimeSliceInterval string
	// Timeout bounds the template reads and writes of one Apply or Read. Default 1s
	// (inside the webhook's 2s timeout).
	Timeout time.Duration
	// Templates reads and writes ResourceClaimTemplates; set by cmd/admission and
	// cmd/updater (no flag). Nil: the backend writes nothing (pods admitted unchanged)
	// and reads nothing.
	Templates ClaimTemplates
}

func (d *DRAConfig) withDefaults() {
	if len(d.DeviceClasses) == 0 {
		d.DeviceClasses = []string{"gpu.nvidia.com"}
	}
	defaultString(&d.Driver, "gpu.nvidia.com")
	defaultString(&d.TimeSliceInterval, TimeSliceIntervals[0])
	if d.Timeout <= 0 {
		d.Timeout = time.Second
	}
}

func (d DRAConfig) validate() []error {
	if d.TimeSliceInterval != "" && !slices.Contains(TimeSliceIntervals, d.TimeSliceInterval) {
		return []error{fmt.Errorf("--dra-time-slice-interval %q: want one of %s", d.TimeSliceInterval, strings.Join(TimeSliceIntervals, ", "))}
	}
	return nil
}

func (d *DRAConfig) addFlags(fs *flag.FlagSet, def DRAConfig) {
	fs.Func("dra-device-classes", fmt.Sprintf("DeviceClass names of GPU requests of the dra backend, comma-separated (default %s).", strings.Join(def.DeviceClasses, ",")), func(s string) error {
		d.DeviceClasses = nil
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				d.DeviceClasses = append(d.DeviceClasses, p)
			}
		}
		return nil
	})
	fs.StringVar(&d.Driver, "dra-driver", def.Driver, "DRA driver name of the GpuConfig the dra backend writes.")
	fs.StringVar(&d.TimeSliceInterval, "dra-time-slice-interval", def.TimeSliceInterval, "Time-slice interval of the dra backend's TimeSlicing: Default, Short, Medium or Long.")
	fs.DurationVar(&d.Timeout, "dra-timeout", def.Timeout, "Bound on the dra backend's ResourceClaimTemplate reads and writes per pod.")
}
