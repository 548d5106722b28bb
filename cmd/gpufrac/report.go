package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/packing"
)

func init() { registerCommand(newReportCmd) }

// reportRow is one workload of the savings report. A value the recommendation does not
// have (no recommendation yet, no memory or compute samples, no observed peak) is nil,
// null in JSON and "-" in the table: no data is not zero.
type reportRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Pods      int    `json:"pods"`
	// ObservedPeakBytes is the pod's highest observed GPU memory in the recent peak
	// window, bytes, added up over containers as their targets are; nil without one.
	ObservedPeakBytes *int64 `json:"observedPeakBytes"`
	// MemoryBytes is the pod's recommended GPU memory (the target), bytes; nil without
	// a memory recommendation.
	MemoryBytes *int64 `json:"memoryBytes"`
	// MemoryRequestBytes is the pod's memory request as the annotations backend
	// writes it by default (--annotation-memory-request=observed-peak): per container
	// the observed peak (times the young margin) where below the target, else the
	// target, bytes. The report packs by it unless --annotation-memory-request=none.
	// nil without a memory target.
	MemoryRequestBytes *int64 `json:"memoryRequestBytes"`
	// MemoryLimitBytes is the pod's memory limit the admission webhook writes where
	// the recommendation has a memoryLimit (burst room above the target), bytes;
	// absent (0) when the limit is the target, MemoryBytes.
	MemoryLimitBytes int64 `json:"memoryLimitBytes,omitempty"`
	// ComputeMilli is the pod's recommended compute, thousandths of one GPU; nil
	// without a compute recommendation.
	ComputeMilli *int64 `json:"computeMilli"`
	// ComputeRequestMilli is the pod's compute request for placement, thousandths of
	// one GPU: its time-sliced containers' computeRequest, written with no limit;
	// absent (0) without one (Exclusive and MPS reserve and enforce ComputeMilli).
	ComputeRequestMilli int64  `json:"computeRequestMilli,omitempty"`
	SharingMode         string `json:"sharingMode"`
	Reason              string `json:"sharingModeReason"`
	// ConfidencePercent is the recommendation's confidence, percent 0–100; nil
	// without one.
	ConfidencePercent *int32 `json:"confidencePercent"`
	Provided          bool   `json:"provided"`
	// placedComputeMilli is the compute the pod is placed by, thousandths of one GPU
	// (writtenTotals.PlacedComputeMilli): ComputeMilli where compute is partitioned,
	// ComputeRequestMilli where time-sliced.
	placedComputeMilli int64
}

// reportTotals compares one GPU per pod with the recommendations packed onto GPUs.
type reportTotals struct {
	Workloads int `json:"workloads"`
	Pods      int `json:"pods"`
	// GPUsToday is one whole GPU per pod, today's practice.
	GPUsToday int `json:"gpusToday"`
	// GPUsNeeded is the GPUs the pods need when packed by their memory request
	// (MemoryRequestBytes; the target with --annotation-memory-request=none) and the
	// compute the webhook writes (best fit, compute shares ≤ 1 per GPU): the compute
	// target where the recommendation partitions compute (MPS), the computeRequest
	// where time-sliced (none: 0); Exclusive pods get a whole GPU.
	GPUsNeeded int `json:"gpusNeeded"`
	// GPUsNeededConfident is GPUsNeeded once every recommendation reaches the minimum
	// confidence (history grows): the low-confidence ones packed by their values too.
	GPUsNeededConfident int `json:"gpusNeededConfident"`
	// GPUMemoryBytes is the memory of one GPU the packing assumed.
	GPUMemoryBytes int64 `json:"gpuMemoryBytes"`
	// LowConfidence counts workloads whose recommendation was under --min-confidence
	// and kept a whole GPU per pod; Oversized those needing more than one GPU.
	LowConfidence int `json:"lowConfidence"`
	Oversized     int `json:"oversized"`
	// WithoutRecommendation names the autoscalers ("namespace/name") the recommender
	// has written no GPUFractionRecommendation for yet: their pods are unknown and not
	// in Pods or any GPU count (no data is not zero). Empty, not null, when none.
	WithoutRecommendation []string `json:"withoutRecommendation"`
	// MemoryUtilisationToday and MemoryUtilisationPacked are the memory the pods are
	// packed by (as GPUsNeeded; a whole GPU for those that keep one) over the memory of
	// the GPUs held, ratio 0–1; nil when no GPU is held (no pods).
	MemoryUtilisationToday  *float64 `json:"memoryUtilisationToday"`
	MemoryUtilisationPacked *float64 `json:"memoryUtilisationPacked"`
	// ComputeUtilisationToday and ComputeUtilisationPacked are the compute the pods are
	// packed by (as GPUsNeeded, at most one GPU per pod) over the compute of the GPUs
	// held, ratio 0–1; nil when no GPU is held (no pods).
	ComputeUtilisationToday  *float64 `json:"computeUtilisationToday"`
	ComputeUtilisationPacked *float64 `json:"computeUtilisationPacked"`
}

func newReportCmd() *cobra.Command {
	var f reportFlags
	cmd := &cobra.Command{
		Use:   "report",
		Args:  noArgs("-n NAMESPACE reports one namespace; gpufrac explain NAME explains one autoscaler"),
		Short: "Savings report: recommendations per workload and GPUs needed against one GPU per pod",
		Long: `report reads every GPUFractionRecommendation (of one namespace with -n) and prints, per
workload: pods, observed peak GPU memory, recommended memory, the memory limit the
admission webhook writes where the recommendation has a memoryLimit above it (LIMIT GiB,
"-": the limit is the recommended memory), recommended compute, a time-sliced pod's
compute request (milli-GPU, reserved for placement with no limit; "-": none), sharing
mode with its reason, and confidence; then the totals: GPUs held today at one per pod versus
GPUs needed if the pods were packed by their recommendations onto GPUs of --gpu-memory
(by the memory request the annotations backend writes by default, the observed peak
where below the target; --annotation-memory-request=none packs by the target; and by
the compute the webhook writes: the compute target where compute is partitioned, a
time-sliced pod's compute request, which is placement only).

With --since (7d, 12h) and --prometheus-url it then prints the before and after over that
window from the recommender's series in Prometheus: GPUs held at one per pod against the
whole-GPU equivalents of what gpufrac wrote into the pods (gpufrac_autoscaler_gpus_allocated:
the memory request where one was written below the limit), the GPUs saved, the pods' recent peak
memory over the memory of each, and when gpufrac started applying.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config or in-cluster).")
	cmd.Flags().StringVarP(&f.namespace, "namespace", "n", "", "Namespace to report on (default: all).")
	cmd.Flags().StringVar(&f.gpuMemory, "gpu-memory", "80Gi", "Memory of one GPU the pods are packed onto (quantity, bytes).")
	cmd.Flags().StringVarP(&f.output, "output", "o", "text", "Output format: text, markdown or json.")
	cmd.Flags().StringVar(&f.since, "since", "", "Also print the before and after over this window (7d, 12h; Prometheus duration) from --prometheus-url (default: the snapshot only).")
	cmd.Flags().StringVar(&f.promURL, "prometheus-url", "", "Prometheus that scrapes the recommender's metrics, for --since.")
	cmd.Flags().StringVar(&f.memoryRequest, "annotation-memory-request", backend.AnnotationsMemoryRequestObservedPeak, "Memory the pods are packed by, as the webhook's --annotation-memory-request: observed-peak (the request the annotations backend writes: the observed peak where below the target) or none (the target).")
	cmd.Flags().Int32Var(&f.minConfidence, "min-confidence", contract.DefaultMinConfidence, "Recommendations under this confidence (percent) keep a whole GPU per pod, as the admission webhook's --min-confidence does not apply them.")
	return cmd
}

// reportFlags are the report command's flag values.
type reportFlags struct {
	kubeconfig, namespace, gpuMemory, output string
	promURL, since, memoryRequest            string
	minConfidence                            int32
}

// run lists the recommendations, summarises them and, with --since, reads the before
// and after from Prometheus, then writes the report in --output's format.
func (f *reportFlags) run(cmd *cobra.Command) error {
	if f.output != "text" && f.output != "markdown" && f.output != "json" {
		return fmt.Errorf("--output %q: want text, markdown or json", f.output)
	}
	gpu, err := parseGPUMemory(f.gpuMemory)
	if err != nil {
		return err
	}
	// The webhook's own default and check of the flag.
	bc := backend.Config{Annotations: backend.AnnotationsConfig{MemoryRequest: f.memoryRequest}}.WithDefaults()
	if err := bc.Validate(); err != nil {
		return err // names --annotation-memory-request
	}
	if err := contract.ValidateMinConfidence(&f.minConfidence); err != nil {
		return err // the webhook's own range
	}
	f.memoryRequest = bc.Annotations.MemoryRequest
	var window model.Duration
	if f.since != "" {
		if window, err = model.ParseDuration(f.since); err != nil || window <= 0 {
			return fmt.Errorf("--since %q: want a positive duration such as 7d or 12h", f.since)
		}
		if err := checkPrometheusURL(f.promURL); err != nil { // before the cluster is read
			return err
		}
	}
	c, err := newClient(f.kubeconfig)
	if err != nil {
		return err
	}
	var list gpufracv1.GPUFractionRecommendationList
	if err := c.List(cmd.Context(), &list, client.InNamespace(f.namespace)); err != nil {
		return fmt.Errorf("listing GPUFractionRecommendations: %w", err)
	}
	// The autoscalers' container policies: what the webhook writes depends on them
	// (minMemory, mode Off, controlled resources).
	var gfas gpufracv1.GPUFractionAutoscalerList
	if err := c.List(cmd.Context(), &gfas, client.InNamespace(f.namespace)); err != nil {
		return fmt.Errorf("listing GPUFractionAutoscalers: %w", err)
	}
	rows, totals := summarise(list.Items, gfas.Items, int64(gpu), f.minConfidence, f.memoryRequest == backend.AnnotationsMemoryRequestObservedPeak)
	if totals.Oversized > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d workloads need more than one %s GPU; they were counted as one whole GPU per pod\n", totals.Oversized, f.gpuMemory)
	}
	var history *beforeAfter
	if window > 0 {
		if history, err = queryBeforeAfter(cmd.Context(), f.promURL, f.namespace, time.Duration(window), time.Now(), cmd.ErrOrStderr()); err != nil {
			return err
		}
	}
	switch f.output {
	case "json":
		return writeReportJSON(cmd.OutOrStdout(), rows, totals, history)
	case "text", "markdown":
		if err := writeReport(cmd.OutOrStdout(), rows, totals, f.output == "markdown"); err != nil || history == nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\nBefore and after over the last %s (from %s):\n", f.since, f.promURL)
		return writeBeforeAfter(cmd.OutOrStdout(), history, f.output == "markdown")
	}
	return fmt.Errorf("--output %q: want text, markdown or json", f.output)
}

// newClient returns a controller-runtime client for the kubeconfig (or the default
// loading rules when empty) with gpufrac's and client-go's types registered.
func newClient(kubeconfig string) (client.Client, error) {
	c, _, err := clusterClient(kubeconfig, "")
	return c, err
}

// clusterClient is how the commands that read a cluster get their client and namespace:
// newClientNamespace, replaced by a fake client in tests.
var clusterClient = newClientNamespace

// newClientNamespace is newClient plus the namespace to use: the flag's value, else the
// kubeconfig context's, else "default".
func newClientNamespace(kubeconfig, namespace string) (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil && kubeconfig != "" {
		return nil, "", badKubeconfigFlag(kubeconfig, err)
	}
	if clientcmd.IsEmptyConfig(err) {
		return nil, "", noKubeconfig(rules)
	}
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	if namespace == "" {
		if namespace, _, err = loader.Namespace(); err != nil {
			return nil, "", err
		}
	}
	s, err := scheme.New()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	return c, namespace, err
}

// badKubeconfigFlag is the error for a --kubeconfig path client-go could not use (err):
// it names the flag and the path, and says so plainly where the file does not exist or
// holds no context, rather than client-go's "stat ..." or the search of KUBECONFIG and
// ~/.kube/config that a given path replaces.
func badKubeconfigFlag(path string, err error) error {
	switch _, serr := os.Stat(path); {
	case errors.Is(serr, fs.ErrNotExist):
		return fmt.Errorf("--kubeconfig %q: the file does not exist", path)
	case clientcmd.IsEmptyConfig(err):
		return fmt.Errorf("--kubeconfig %q holds no usable context: want a kubeconfig file (make demo prints it)", path)
	}
	return fmt.Errorf("--kubeconfig %q: %w", path, err)
}

// noKubeconfig is the error for a kubeconfig search that found nothing: it names where
// client-go looked (the files KUBECONFIG lists, else ~/.kube/config) and what is wrong
// with each, so that a KUBECONFIG set to a path that does not exist is not reported as
// unset.
func noKubeconfig(rules *clientcmd.ClientConfigLoadingRules) error {
	var why []string
	for _, p := range rules.Precedence {
		if _, err := os.Stat(p); err != nil {
			why = append(why, p+" does not exist")
		} else {
			why = append(why, p+" holds no usable context")
		}
	}
	where := "KUBECONFIG is not set"
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		where = clientcmd.RecommendedConfigPathEnvVar + "=" + env
	}
	if len(why) > 0 {
		where += ", and " + strings.Join(why, ", ")
	}
	return fmt.Errorf("no kubeconfig found: %s: pass --kubeconfig or set KUBECONFIG to a kubeconfig file (make demo prints it)", where)
}

// summarise turns recommendations into report rows and packs their pods, by their
// memory requests when byRequest, else by their targets. gfas are the autoscalers (a
// recommendation's is the one of its namespace and name; none: no container policies).
func summarise(items []gpufracv1.GPUFractionRecommendation, gfas []gpufracv1.GPUFractionAutoscaler, gpuMemory int64, minConfidence int32, byRequest bool) ([]reportRow, reportTotals) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	byName := map[[2]string]*gpufracv1.GPUFractionAutoscaler{}
	for i := range gfas {
		byName[[2]string{gfas[i].Namespace, gfas[i].Name}] = &gfas[i]
	}
	t := reportTotals{GPUMemoryBytes: gpuMemory, WithoutRecommendation: []string{}}
	k := reportPacker{gpuMemory: gpuMemory, byRequest: byRequest, p: packing.New(gpuMemory), all: packing.New(gpuMemory)}
	rows := []reportRow{}
	written := map[[2]string]bool{}
	for i := range items {
		r := &items[i]
		written[[2]string{r.Namespace, r.Name}] = true
		row := rowOf(byName[[2]string{r.Namespace, r.Name}], r, gpuMemory)
		rows = append(rows, row)
		if row.MemoryBytes != nil && *row.MemoryBytes > gpuMemory {
			t.Oversized++
		}
		// The webhook's confidence gate (contract.ConfidentEnough).
		confident := contract.ConfidentEnough(r.Status.ConfidencePercent, minConfidence)
		if row.Provided && !confident {
			t.LowConfidence++
		}
		t.Workloads++
		t.Pods += row.Pods
		k.place(row, confident)
	}
	for i := range gfas {
		if !written[[2]string{gfas[i].Namespace, gfas[i].Name}] {
			t.WithoutRecommendation = append(t.WithoutRecommendation, gfas[i].Namespace+"/"+gfas[i].Name)
		}
	}
	sort.Strings(t.WithoutRecommendation)
	t.GPUsToday = t.Pods
	t.GPUsNeeded = k.p.Held()
	t.GPUsNeededConfident = k.all.Held()
	if t.GPUsToday > 0 {
		t.MemoryUtilisationToday = ptr.To(float64(k.recommended) / float64(int64(t.GPUsToday)*gpuMemory))
		t.ComputeUtilisationToday = ptr.To(float64(k.computeMilli) / float64(t.GPUsToday*1000))
	}
	if t.GPUsNeeded > 0 {
		t.MemoryUtilisationPacked = ptr.To(float64(k.recommended) / float64(int64(t.GPUsNeeded)*gpuMemory))
		t.ComputeUtilisationPacked = ptr.To(float64(k.computeMilli) / float64(t.GPUsNeeded*1000))
	}
	return rows, t
}

// rowOf is the report row of one recommendation, before packing; gfa (nil: none) gives
// the container policies the webhook writes it under, on GPUs of gpuMemory bytes.
func rowOf(gfa *gpufracv1.GPUFractionAutoscaler, r *gpufracv1.GPUFractionRecommendation, gpuMemory int64) reportRow {
	row := reportRow{Namespace: r.Namespace, Name: r.Name, Pods: int(r.Status.MatchedPods), SharingMode: string(r.Status.SharingMode),
		Provided: meta.IsStatusConditionTrue(r.Status.Conditions, gpufracv1.ConditionRecommendationProvided)}
	row.ConfidencePercent = r.Status.ConfidencePercent
	// The pod's peak adds up like its target: init containers count as the
	// largest of them, not on top of the others (gpufracv1.PodTotal).
	if peak, ok := gpufracv1.PodTotal(r.Status.ContainerRecommendations, nil, func(c *gpufracv1.ContainerRecommendation) (int64, bool) {
		if c.ObservedPeakMemory == nil {
			return 0, false
		}
		return c.ObservedPeakMemory.Value(), true
	}); ok {
		row.ObservedPeakBytes = &peak
	}
	for _, c := range r.Status.ContainerRecommendations {
		if c.CountsInConfidence() || row.Reason == "" {
			row.Reason = c.SharingModeReason // the pod's mode comes from these
		}
	}
	if r.Status.Memory != nil {
		row.MemoryBytes = ptr.To(r.Status.Memory.Value())
	}
	// The webhook's reading of the recommendation: the memory request is the observed
	// peak with a young workload's margin where below the target; the policy's
	// minMemory raises, and maxMemory lowers, a target that predates it
	// (contract.WithPolicy).
	w := writtenOf(gfa, r, gpuMemory)
	if w.Moved {
		row.MemoryBytes = ptr.To(w.MemoryBytes)
	}
	if w.MemoryRequestBytes > 0 {
		row.MemoryRequestBytes = ptr.To(w.MemoryRequestBytes)
	}
	row.MemoryLimitBytes, row.ComputeRequestMilli = w.MemoryLimitBytes, w.ComputeRequestMilli
	row.placedComputeMilli = w.PlacedComputeMilli
	if r.Status.Compute != nil {
		row.ComputeMilli = ptr.To(r.Status.Compute.MilliValue())
	}
	return row
}

// reportPacker packs the report's pods onto GPUs of gpuMemory bytes: p as the webhook
// applies recommendations today, all as if every recommendation were confident enough.
// recommended (bytes) and computeMilli (thousandths of one GPU) sum what the pods are
// packed by today.
type reportPacker struct {
	gpuMemory                 int64
	byRequest                 bool
	p, all                    *packing.Packer
	id                        int
	recommended, computeMilli int64
}

// place packs the pods of one row; confident is whether the webhook applies its
// recommendation. A recommendation without a memory target keeps a whole GPU per pod:
// unknown memory is not zero memory.
func (k *reportPacker) place(row reportRow, confident bool) {
	gpuMemory := k.gpuMemory
	// sized: the recommendation has a memory target that fits one GPU and shares it.
	sized := row.Provided && row.MemoryBytes != nil && *row.MemoryBytes <= gpuMemory && row.SharingMode != string(gpufracv1.SharingModeExclusive)
	for i := 0; i < row.Pods; i++ {
		k.id++
		whole := packing.Alloc{MemoryBytes: gpuMemory, ComputeMilli: 1000}
		a := whole
		if sized {
			mem := *row.MemoryBytes
			if k.byRequest && row.MemoryRequestBytes != nil {
				mem = *row.MemoryRequestBytes
			}
			a = packing.Alloc{MemoryBytes: mem, ComputeMilli: row.placedComputeMilli}
		}
		// Not applied (none yet, or too little confidence), exclusive, without a memory
		// target, or larger than one GPU: keeps a whole GPU today.
		today := whole
		if sized && confident {
			today = a
		}
		k.recommended += min(today.MemoryBytes, gpuMemory)
		k.computeMilli += min(today.ComputeMilli, 1000)
		k.p.Place(k.id, today)
		k.all.Place(k.id, a)
	}
}

func writeReport(w io.Writer, rows []reportRow, t reportTotals, markdown bool) error {
	gib := func(b *int64) string {
		if b == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(*b)/(1<<30))
	}
	header := []string{"NAMESPACE", "WORKLOAD", "PODS", "PEAK GiB", "MEMORY GiB", "LIMIT GiB", "COMPUTE", "COMPUTE REQUEST", "SHARING", "CONFIDENCE", "WHY"}
	var lines [][]string
	for _, r := range rows {
		if !r.Provided {
			lines = append(lines, []string{r.Namespace, r.Name, fmt.Sprint(r.Pods), "-", "-", "-", "-", "-", "-", "-", "no recommendation yet"})
			continue
		}
		limit, request := "-", "-" // the limit is the target; no compute request
		if r.MemoryLimitBytes > 0 {
			limit = gib(&r.MemoryLimitBytes)
		}
		if r.ComputeRequestMilli > 0 {
			request = fmt.Sprintf("%dm", r.ComputeRequestMilli)
		}
		compute, confidence := "-", "-"
		if r.ComputeMilli != nil {
			compute = fmt.Sprintf("%dm", *r.ComputeMilli)
		}
		if r.ConfidencePercent != nil {
			confidence = fmt.Sprintf("%d%%", *r.ConfidencePercent)
		}
		why := r.Reason
		if r.MemoryBytes == nil {
			why = strings.TrimPrefix(why+"; ", "; ") + "no memory target: keeps a whole GPU per pod"
		}
		lines = append(lines, []string{r.Namespace, r.Name, fmt.Sprint(r.Pods), gib(r.ObservedPeakBytes), gib(r.MemoryBytes), limit,
			compute, request, r.SharingMode, confidence, why})
	}
	if err := writeTable(w, header, lines, markdown); err != nil {
		return err
	}
	if n := len(t.WithoutRecommendation); n > 0 {
		if _, err := fmt.Fprintf(w, "\n%d autoscalers without a GPUFractionRecommendation yet (%s): the recommender has not written one (is it running and watching their namespace?); their pods are not counted below.\n",
			n, strings.Join(t.WithoutRecommendation, ", ")); err != nil {
			return err
		}
	}
	if t.GPUsToday == 0 {
		_, err := fmt.Fprintf(w, "\n%d workloads, no pods: no GPUs held today, nothing to pack.\n", t.Workloads)
		return err
	}
	pct := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", *v*100)
	}
	saved := 1 - float64(t.GPUsNeeded)/float64(t.GPUsToday)
	_, err := fmt.Fprintf(w, "\n%d workloads, %d pods (%d workloads under the confidence the webhook applies keep whole GPUs). GPUs (%s each): %d today at one per pod → %d packed by the recommendations (%.0f%% fewer).\n"+
		"Once every workload has enough history: %d.\n"+
		"Of the GPUs held, the recommendations allocate %s of memory and %s of compute today → %s and %s packed.\n",
		t.Workloads, t.Pods, t.LowConfidence, resource.NewQuantity(t.GPUMemoryBytes, resource.BinarySI), t.GPUsToday, t.GPUsNeeded, math.Round(saved*100),
		t.GPUsNeededConfident, pct(t.MemoryUtilisationToday), pct(t.ComputeUtilisationToday), pct(t.MemoryUtilisationPacked), pct(t.ComputeUtilisationPacked))
	return err
}

// writeReportJSON writes the report as one indented JSON object (docs/cli.md):
// "workloads" (the rows), "totals" and "beforeAfter" (null without --since).
func writeReportJSON(w io.Writer, rows []reportRow, totals reportTotals, history *beforeAfter) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"workloads": rows, "totals": totals, "beforeAfter": history})
}

// writeTable writes a header and rows as a Markdown table, or as aligned text columns.
// It returns the writer's error.
func writeTable(w io.Writer, header []string, rows [][]string, markdown bool) error {
	if markdown {
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		for _, l := range rows {
			if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(l, " | ")); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, l := range rows {
		fmt.Fprintln(tw, strings.Join(l, "\t"))
	}
	return tw.Flush()
}
