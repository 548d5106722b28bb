package backend

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Config holds what the backends need to write and read a fraction: the settings every
// backend reads and each backend's own section. The zero value plus WithDefaults is a
// usable configuration; cmd/admission and cmd/updater map the same flags onto it with
// AddFlags.
type Config struct {
	// GPUResource is the extended resource that asks for whole GPUs. Default
	// nvidia.com/gpu.
	GPUResource corev1.ResourceName
	// GPUResourcePrefix marks a container as a GPU container when one of its request or
	// limit names starts with it. Default "nvidia.com/".
	GPUResourcePrefix string
	// GPUMemoryBytes is the memory of one GPU, bytes. No larger memory is ever written,
	// and the KAI gpu-fraction is memory divided by it, or by the memory of the GPUs a
	// pod's scheduling constraints pin it to (ForPod). It must be the smallest GPU an
	// unpinned pod may land on: a KAI fraction of it on a smaller GPU is less memory than
	// the target. Default 80Gi.
	GPUMemoryBytes int64
	// MemoryOverhead is added per backend to the recommended memory of each container
	// before it is written, bytes (spec.backend.memoryOverhead of the autoscaler is added
	// on top). Default 0 for every backend.
	MemoryOverhead map[gpufracv1.BackendType]int64

	// HAMi configures the hami backend.
	HAMi HAMiConfig
	// KAI configures the kai backend (and the KAI settings kai-nvfractions shares).
	KAI KAIConfig
	// NVFractions configures the kai-nvfractions backend.
	NVFractions NVFractionsConfig
	// MPS configures the mps backend.
	MPS MPSConfig
	// Annotations configures the annotations backend.
	Annotations AnnotationsConfig
	// DRA configures the dra backend.
	DRA DRAConfig
	// DevicePlugin configures the nvidia-timeslicing and nvidia-mps backends.
	DevicePlugin DevicePluginConfig
}

// UsableGPUMemoryBytes is the memory of one GPU a KAI fraction is a share of:
// GPUMemoryBytes minus KAI.ReservedMemoryBytes, bytes.
func (c Config) UsableGPUMemoryBytes() int64 {
	return c.GPUMemoryBytes - max(c.KAI.ReservedMemoryBytes, 0)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	defaultResource(&c.GPUResource, "nvidia.com/gpu")
	defaultString(&c.GPUResourcePrefix, "nvidia.com/")
	if c.GPUMemoryBytes <= 0 {
		c.GPUMemoryBytes = 80 << 30
	}
	c.HAMi.withDefaults()
	c.KAI.withDefaults()
	c.NVFractions.withDefaults()
	c.MPS.withDefaults()
	c.Annotations.withDefaults()
	c.DRA.withDefaults()
	c.DevicePlugin.withDefaults()
	return c
}

// Validate reports every setting that cannot work, joined.
func (c Config) Validate() error {
	errs := c.KAI.validate(c.GPUMemoryBytes)
	errs = append(errs, c.NVFractions.validate()...)
	errs = append(errs, c.MPS.validate()...)
	errs = append(errs, c.Annotations.validate()...)
	errs = append(errs, c.DRA.validate()...)
	errs = append(errs, c.DevicePlugin.validate()...)
	errs = append(errs, c.validateNames()...)
	for b, v := range c.MemoryOverhead {
		if !slices.Contains(Types, b) {
			errs = append(errs, fmt.Errorf("--memory-overhead: unknown backend %q", b))
		}
		if v < 0 {
			errs = append(errs, fmt.Errorf("--memory-overhead %s: must not be negative", b))
		}
	}
	return errors.Join(errs...)
}

// AddFlags registers the backends' flags on fs, writing into c. Call WithDefaults after
// parsing for the fields left empty.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	d := Config{}.WithDefaults()
	fs.Func("gpu-resource", fmt.Sprintf("Extended resource that asks for whole GPUs (default %s).", d.GPUResource), func(s string) error { c.GPUResource = corev1.ResourceName(s); return nil })
	fs.StringVar(&c.GPUResourcePrefix, "gpu-resource-prefix", d.GPUResourcePrefix, "A container is a GPU container when a request or limit name starts with this prefix.")
	fs.Func("gpu-memory", "Memory of one GPU (quantity, bytes): no larger memory is written, and the KAI gpu-fraction is memory divided by it (default 80Gi).", func(s string) error {
		v, err := ParseGPUMemory(s)
		c.GPUMemoryBytes = v
		return err
	})
	fs.Func("memory-overhead", "Memory added per backend before writing, comma-separated backend=quantity pairs, e.g. hami=256Mi,mps=128Mi (default 0 for every backend); spec.backend.memoryOverhead is added on top.", func(s string) error {
		m, err := parseOverheads(s)
		if err != nil {
			return err
		}
		c.MemoryOverhead = m
		return nil
	})
	c.HAMi.addFlags(fs, d.HAMi)
	c.KAI.addFlags(fs, d.KAI)
	c.NVFractions.addFlags(fs, d.NVFractions)
	c.MPS.addFlags(fs, d.MPS)
	c.Annotations.addFlags(fs, d.Annotations)
	c.DRA.addFlags(fs, d.DRA)
	c.DevicePlugin.addFlags(fs, d.DevicePlugin)
}

func defaultString(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

func defaultResource(s *corev1.ResourceName, v corev1.ResourceName) {
	if *s == "" {
		*s = v
	}
}

// resourceFlag registers a flag that sets a resource name.
func resourceFlag(fs *flag.FlagSet, p *corev1.ResourceName, name string, def corev1.ResourceName, usage string) {
	fs.Func(name, fmt.Sprintf("%s (default %s).", usage, def), func(s string) error { *p = corev1.ResourceName(s); return nil })
}

// quantityFlag parses a quantity flag into bytes: not negative, and positive when
// positive is set.
// MinGPUMemoryBytes is the least memory ParseGPUMemory accepts for one GPU, bytes (1 GiB).
// The smallest GPU slice a backend hands out is larger (MIG 1g.5gb, about 4.75 GiB), so a
// value under it is a unit left off (80 for 80Gi, which would be 80 bytes), not a GPU.
const MinGPUMemoryBytes = 1 << 30

// ParseGPUMemory parses the memory of one GPU, a Kubernetes quantity in bytes ("80Gi";
// "80GiB" is read as 80Gi, "80GB" as 80G), as every --gpu-memory flag takes it. It returns an error
// naming s for a malformed quantity, for one below MinGPUMemoryBytes (zero, negative,
// or without a unit), and for a decimal suffix (k, M, G, T, P, E; "80G" is 80×10⁹
// bytes, 74.5 GiB, not the 80 GiB of an "80 GB" GPU, whose memory is binary); plain
// bytes, "80e9" included, are taken as they are.
func ParseGPUMemory(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if len(t) > 1 && t[len(t)-1] == 'B' && strings.IndexByte("ikMGTPE", t[len(t)-2]) >= 0 {
		t = t[:len(t)-1] // "80GiB" is 80Gi; "80GB" is 80G, refused below as decimal
	}
	q, err := resource.ParseQuantity(t)
	if err != nil {
		return 0, fmt.Errorf("%q: want the memory of one GPU as a quantity such as 80Gi, in binary units (Ki, Mi, Gi, Ti) or plain bytes", s)
	}
	if i := strings.LastIndexAny(t, "0123456789."); i >= 0 {
		if bin, ok := decimalSuffixes[t[i+1:]]; ok {
			return 0, fmt.Errorf("%q is in decimal units, %.1f GiB: GPU memory is binary, write %s%s (or %s, plain bytes, if a decimal size is meant)",
				s, q.AsApproximateFloat64()/(1<<30), t[:i+1], bin, q.AsDec().String())
		}
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("%q is not a positive size: want the memory of one GPU with its unit, such as 80Gi", s)
	}
	if q.Cmp(*resource.NewQuantity(MinGPUMemoryBytes, resource.BinarySI)) < 0 {
		return 0, fmt.Errorf("%q is %d bytes, under 1Gi: want the memory of one GPU with its unit, such as 80Gi", s, q.Value())
	}
	return q.Value(), nil
}

// decimalSuffixes are the decimal quantity suffixes ParseGPUMemory refuses, each with
// the binary suffix the user most likely meant.
var decimalSuffixes = map[string]string{"k": "Ki", "M": "Mi", "G": "Gi", "T": "Ti", "P": "Pi", "E": "Ei"}

// quantityFlag parses a flag's quantity of bytes into p: zero or more (the GPU's own
// memory is ParseGPUMemory's).
func quantityFlag(p *int64) func(string) error {
	return func(s string) error {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return err
		}
		if q.Sign() < 0 {
			return fmt.Errorf("%q: want a positive quantity", s)
		}
		*p = q.Value()
		return nil
	}
}

// ParseType returns the backend type named s (spaces trimmed), or an error naming s and
// every known type (Types, sorted).
func ParseType(s string) (gpufracv1.BackendType, error) {
	b := gpufracv1.BackendType(strings.TrimSpace(s))
	if !slices.Contains(Types, b) {
		names := make([]string, len(Types))
		for i, t := range Types {
			names[i] = string(t)
		}
		sort.Strings(names)
		return "", fmt.Errorf("%q: unknown backend, want one of %s", s, strings.Join(names, ", "))
	}
	return b, nil
}

// parseOverheads parses "hami=256Mi,mps=0".
func parseOverheads(s string) (map[gpufracv1.BackendType]int64, error) {
	m := map[gpufracv1.BackendType]int64{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want backend=quantity", part)
		}
		b, err := ParseType(k)
		if err != nil {
			return nil, err
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s: overhead must not be negative", k)
		}
		m[b] = q.Value()
	}
	return m, nil
}

// validateNames returns an error naming the flag for each name the backends write into
// pods that the API server refuses, in every pod they write: a HAMi resource that is no
// extended resource name (no domain, a kubernetes.io one, or no qualified name: every
// container's limits), an MPS variable that is no environment variable name, a KAI
// scheduler that is no DNS subdomain, a KAI annotation, queue label or queue, or an
// annotations backend pod total key, that is no annotation key, label key or label
// value. The API server validates a pod after admission and rejects it whatever the
// webhook's failure policy: such a flag would block the creation of every pod gpufrac
// patches.
func (c Config) validateNames() []error {
	var errs []error
	check := func(flag, value string, problems []string) {
		if value != "" && len(problems) > 0 { // empty: the default, set by WithDefaults
			errs = append(errs, fmt.Errorf("--%s %q: %s", flag, value, strings.Join(problems, "; ")))
		}
	}
	for _, r := range []struct {
		flag string
		name corev1.ResourceName
	}{{"hami-memory-resource", c.HAMi.MemoryResource}, {"hami-cores-resource", c.HAMi.CoresResource}} {
		check(r.flag, string(r.name), extendedResourceProblems(string(r.name)))
	}
	check("mps-thread-percentage-env", c.MPS.ThreadPercentageEnv, validation.IsEnvVarName(c.MPS.ThreadPercentageEnv))
	check("mps-pinned-memory-env", c.MPS.PinnedMemoryEnv, validation.IsEnvVarName(c.MPS.PinnedMemoryEnv))
	check("kai-scheduler-name", c.KAI.SchedulerName, validation.IsDNS1123Subdomain(c.KAI.SchedulerName))
	for _, k := range []struct{ flag, key string }{
		{"kai-memory-annotation", c.KAI.MemoryAnnotation}, {"kai-fraction-annotation", c.KAI.FractionAnnotation},
		{"kai-container-name-annotation", c.KAI.ContainerNameAnnotation},
		{"annotation-memory-key", c.Annotations.MemoryKey}, {"annotation-compute-key", c.Annotations.ComputeKey},
	} {
		check(k.flag, k.key, validation.IsQualifiedName(k.key))
	}
	if c.KAI.Queue != "" {
		check("kai-queue-label", c.KAI.QueueLabel, validation.IsQualifiedName(c.KAI.QueueLabel))
		check("kai-queue", c.KAI.Queue, validation.IsValidLabelValue(c.KAI.Queue))
	}
	return errs
}

// extendedResourceProblems says why name is no extended resource name a container may
// ask for, as the API server checks it (a domain-prefixed name outside kubernetes.io,
// not requests.*, whose quota name requests.<name> is a qualified name); nil when it is
// one.
func extendedResourceProblems(name string) []string {
	domain, _, ok := strings.Cut(name, "/")
	switch {
	case !ok:
		return []string{"want a domain-prefixed extended resource name, such as nvidia.com/gpumem"}
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
		return []string{"the kubernetes.io domain is Kubernetes' own, no extended resource"}
	case strings.HasPrefix(name, "requests."):
		return []string{"requests. is a quota prefix, no extended resource"}
	}
	return validation.IsQualifiedName("requests." + name)
}
