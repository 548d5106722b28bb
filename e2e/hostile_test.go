package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

const hostileNS = "e2e-hostile"

// hostileHistory writes dcgm-exporter series the way real clusters get them wrong, one
// Deployment per kind of bad data, as OpenMetrics for the backfill:
//   - exported: scraped without honor_labels (workload labels in exported_*, pod names
//     the exporter), plus the exporter's own series for an idle GPU;
//   - mig, mig-util: MIG instances (UUID + GPU_I_ID, profile 3g.40gb), where GPU_UTIL
//     reads 0 and GR_ENGINE_ACTIVE is a ratio of the instance;
//   - shared: two pods on one GPU, each given the device's value (memory, and
//     GR_ENGINE_ACTIVE saturated, at 0.97, in 3 of every 10 minutes);
//   - nan: NaN and DCGM blank sentinels among valid samples;
//   - and one gpufrac agent series of a pod in another namespace.
//
// Pods are named by the Deployment convention and have no kube-state-metrics series, so
// they are attributed by naming convention.
func hostileHistory(dir string, end time.Time) (string, error) {
	type series struct {
		labels string
		value  func(i int) string
		hours  int
	}
	pod := func(deploy, sfx string) string { return deploy + "-5d8f7b9c4x-" + sfx }
	l := func(kv ...string) string {
		var b []string
		for i := 0; i < len(kv); i += 2 {
			b = append(b, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
		}
		return "{" + strings.Join(b, ",") + "}"
	}
	constant := func(v string) func(int) string { return func(int) string { return v } }
	fb := []series{
		{l("namespace", "gpu-operator", "pod", "dcgm-exporter-x2k4p", "container", "exporter", "UUID", "GPU-e",
			"exported_namespace", hostileNS, "exported_pod", pod("exported", "bcdfg"), "exported_container", "inference"), constant("10240"), 3},
		{l("namespace", "gpu-operator", "pod", "dcgm-exporter-x2k4p", "container", "exporter", "UUID", "GPU-idle"), constant("70000"), 3},
		{l("namespace", hostileNS, "pod", pod("mig", "bcdfg"), "container", "inference", "UUID", "GPU-m", "GPU_I_ID", "1", "GPU_I_PROFILE", "3g.40gb"), constant("5000"), 3},
		{l("namespace", hostileNS, "pod", pod("mig-util", "bcdfg"), "container", "inference", "UUID", "GPU-m", "GPU_I_ID", "2", "GPU_I_PROFILE", "3g.40gb"), constant("5000"), 3},
		{l("namespace", hostileNS, "pod", pod("shared", "bcdfg"), "container", "inference", "UUID", "GPU-s"), constant("30000"), 30},
		{l("namespace", hostileNS, "pod", pod("shared", "bcdfh"), "container", "inference", "UUID", "GPU-s"), constant("30000"), 30},
		{l("namespace", hostileNS, "pod", pod("nan", "bcdfg"), "container", "inference", "UUID", "GPU-n"), func(i int) string {
			switch i % 40 {
			case 7:
				return "NaN"
			case 23:
				return "9223372036854775794" // DCGM blank sentinel
			}
			return "8000"
		}, 3},
	}
	util := []series{
		{l("namespace", hostileNS, "pod", pod("mig", "bcdfg"), "container", "inference", "UUID", "GPU-m", "GPU_I_ID", "1"), constant("0"), 3},
		{l("namespace", hostileNS, "pod", pod("mig-util", "bcdfg"), "container", "inference", "UUID", "GPU-m", "GPU_I_ID", "2"), constant("0"), 3},
		{l("namespace", hostileNS, "pod", pod("nan", "bcdfg"), "container", "inference", "UUID", "GPU-n"), func(i int) string {
			if i%40 == 11 {
				return "250" // impossible utilisation
			}
			return "20"
		}, 3},
	}
	saturated := func(i int) string {
		if i%10 < 3 {
			return "0.97"
		}
		return "0.1"
	}
	gr := []series{
		{l("namespace", hostileNS, "pod", pod("mig", "bcdfg"), "container", "inference", "UUID", "GPU-m", "GPU_I_ID", "1", "GPU_I_PROFILE", "3g.40gb"), constant("0.3"), 3},
		{l("namespace", hostileNS, "pod", pod("shared", "bcdfg"), "container", "inference", "UUID", "GPU-s"), saturated, 30},
		{l("namespace", hostileNS, "pod", pod("shared", "bcdfh"), "container", "inference", "UUID", "GPU-s"), saturated, 30},
	}
	var b strings.Builder
	family := func(name string, ss []series) {
		fmt.Fprintf(&b, "# TYPE %s gauge\n", name)
		for _, s := range ss {
			// Five minutes more than the hours: see youngMargin below.
			n := s.hours*60 + 5
			for i := 0; i < n; i++ {
				t := end.Add(-time.Duration(n-1-i) * time.Minute)
				fmt.Fprintf(&b, "%s%s %s %d\n", name, s.labels, s.value(i), t.Unix())
			}
		}
	}
	family("DCGM_FI_DEV_FB_USED", fb)
	family("DCGM_FI_DEV_GPU_UTIL", util)
	family("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gr)
	// One agent series elsewhere: with --metric-source auto it must not switch the
	// DCGM-only workloads above to the agent (issue 13 kind 2).
	family("gpufrac_pod_gpu_memory_used_bytes", []series{
		{l("namespace", "e2e-agent-elsewhere", "pod", "other-0", "container", "main", "UUID", "GPU-x"), constant("1073741824"), 3},
	})
	b.WriteString("# EOF\n")
	path := filepath.Join(dir, "hostile.om")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func init() { backfills["hostile"] = hostileHistory }

func TestHostileMetrics(t *testing.T) {
	createNamespace(t, hostileNS)
	names := []string{"exported", "mig", "mig-util", "shared", "nan"}
	for _, n := range names {
		create(t, gpuDeployment(hostileNS, n, "inference", 1), autoscaler(hostileNS, n, n))
	}
	startRecommender(t) // --metric-source auto: every source present, chosen per pod
	recs := map[string]*gpufracv1.GPUFractionRecommendation{}
	for _, n := range names {
		waitFor(t, 90*time.Second, "recommendation of "+n, func() (bool, error) {
			recs[n] = recommendation(t, hostileNS, n)
			c := condition(recs[n], gpufracv1.ConditionRecommendationProvided)
			return c != nil && c.Status == metav1.ConditionTrue, nil
		})
	}
	mib := func(r *gpufracv1.GPUFractionRecommendation) float64 {
		return r.Status.ContainerRecommendations[0].Target.Memory.AsApproximateFloat64() / (1 << 20)
	}
	// The 3-hour series make young workloads (history under 12 h): their memory target
	// carries the young margin 100/n for the n whole hours at their memory level
	// (docs/recommender.md, "Young workloads"). A constant series of 3 h and 5 minutes is
	// at its level for 2 or 3 whole hourly intervals, depending on where the hour
	// boundaries cut it (the span counts a memory-only container's history from its first
	// hourly peak, stamped at that hour's end, so exactly 3 h starting just after an hour
	// boundary would count 1), so the stated margin must be 33-50 %; a 30-hour history is
	// not young (margin 0).
	youngMargin := func(what string, r *gpufracv1.GPUFractionRecommendation, young bool) int32 {
		t.Helper()
		m := r.Status.ContainerRecommendations[0].YoungMarginPercent
		if (young && (m < 33 || m > 50)) || (!young && m != 0) {
			t.Errorf("%s: youngMarginPercent %d, want 33-50 for 3 h of constant history (young %v), 0 otherwise", what, m, young)
		}
		return m
	}
	within := func(what string, got, want float64) {
		t.Helper()
		m := youngMargin(what, recs[what], what != "shared")
		// The stated margin is 100/n rounded down to a whole percent (33 for a third):
		// the target's own margin lies below the next percent. One 5 % histogram bucket
		// above, rounded up to MiB.
		lo, hi := want*(1+float64(m)/100), want*(1+float64(m+1)/100)
		if m == 0 {
			hi = lo
		}
		if got < lo*0.99 || got > hi*1.05+2 {
			t.Errorf("%s: memory target %.0f MiB, want %.0f–%.0f MiB (+1 bucket)", what, got, lo, hi)
		}
	}

	t.Run("an agent series elsewhere: each workload is still read from dcgm", func(t *testing.T) {
		for _, n := range names {
			if ms := recs[n].Status.MetricSources; len(ms) != 1 || ms[0].Name != "dcgm" || ms[0].Pods < 1 {
				t.Errorf("%s: metricSources %v, want dcgm alone", n, ms)
			}
		}
	})
	t.Run("exported_* labels: the workload's usage, never the exporter's", func(t *testing.T) {
		r := recs["exported"]
		within("exported", mib(r), 10240*1.15)
		if r.Status.Attribution != gpufracv1.AttributionPodNamingConvention {
			t.Errorf("attribution %q, want PodNamingConvention", r.Status.Attribution)
		}
	})
	t.Run("MIG: memory per instance; GPU_UTIL 0 is unsupported, not idle; activity is of the instance", func(t *testing.T) {
		mig, util := recs["mig"].Status.ContainerRecommendations[0], recs["mig-util"].Status.ContainerRecommendations[0]
		within("mig", mib(recs["mig"]), 5000*1.15)
		within("mig-util", mib(recs["mig-util"]), 5000*1.15)
		// GR_ENGINE_ACTIVE 0.3 of a 3g.40gb is 3/7 × 0.3 = 0.129 of the GPU (issue 13 kind 5).
		if mig.ComputeSource != "DCGM_FI_PROF_GR_ENGINE_ACTIVE" || mig.Target.Compute == nil || mig.Target.Compute.MilliValue() != 150 {
			t.Errorf("mig: compute %v from %q, want 150m from DCGM_FI_PROF_GR_ENGINE_ACTIVE (0.13 bucket end × 1.15)", mig.Target.Compute, mig.ComputeSource)
		}
		if m := mig.MIG; m == nil || m.MeasuredProfile != "3g.40gb" || m.ComputeOfProfile == nil || m.ComputeOfProfile.MilliValue() != 350 || m.SmallestProfile != "2g.20gb" {
			t.Errorf("mig: MIG status %+v, want measured on 3g.40gb, 350m of it, smallest profile 2g.20gb", m)
		}
		if util.Target.Compute != nil {
			t.Errorf("mig-util: compute %s recommended from GPU_UTIL zeros on a MIG instance, want none", util.Target.Compute)
		}
		// Issue 16 item 3: gpufrac explain names the instance and the smallest profile.
		out, err := exec.Command(filepath.Join(repoRoot, "bin", "gpufrac"), "explain", "mig", "-n", hostileNS, "--kubeconfig="+testCluster.Kubeconfig).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "MIG     measured on a 3g.40gb instance") || !strings.Contains(string(out), "2g.20gb is the smallest A100/H100 80GB MIG profile that holds") {
			t.Errorf("gpufrac explain mig (%v): want the 3g.40gb instance line and the 2g.20gb advice:\n%s", err, out)
		}
		if m := util.MIG; m == nil || m.MeasuredProfile != "3g.40gb" || m.ComputeOfProfile != nil || m.SmallestProfile != "1g.10gb" {
			t.Errorf("mig-util: MIG status %+v, want measured on 3g.40gb, no compute, smallest profile 1g.10gb for the memory", m)
		}
	})
	t.Run("shared GPU with the device value copied to each pod: upper bound, low confidence", func(t *testing.T) {
		r := recs["shared"]
		within("shared", mib(r), 30000*1.15) // never summed to 60000
		c := condition(r, gpufracv1.ConditionLowConfidence)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "SharedDeviceValues" || *r.Status.ConfidencePercent != 40 {
			t.Errorf("want LowConfidence/SharedDeviceValues at 40%%, got %+v confidence %v", c, *r.Status.ConfidencePercent)
		}
	})
	t.Run("shared GPU: its saturation is kept as contention evidence, in the checkpoint", func(t *testing.T) {
		// The device's GR_ENGINE_ACTIVE, copied to both pods, reads 0.97 (saturated) in 3
		// of every 10 minutes: the recommender's checkpoint of the workload carries
		// co-tenant samples of which about 30 % saturated (docs/recommender.md, the
		// closed loop), read through the real Prometheus and written to the API server.
		var cc *gpufracv1.ContentionCheckpoint
		waitFor(t, 90*time.Second, "checkpoint of shared with contention evidence", func() (bool, error) {
			var cp gpufracv1.GPUFractionCheckpoint
			if err := testCluster.Client.Get(context.Background(), types.NamespacedName{Namespace: hostileNS, Name: "shared"}, &cp); err != nil {
				return false, err
			}
			if len(cp.Status.Containers) != 1 || cp.Status.Containers[0].Contention == nil {
				return false, fmt.Errorf("containers %d, no contention evidence", len(cp.Status.Containers))
			}
			cc = cp.Status.Containers[0].Contention
			return true, nil
		})
		// 30 h of two pods' per-minute samples, weights halving every 24 h: well over a
		// thousand co-tenant samples.
		if share := cc.SaturatedSamples / cc.CoTenantSamples; cc.CoTenantSamples < 1000 || share < 0.27 || share > 0.33 {
			t.Errorf("contention evidence %.1f saturated of %.1f co-tenant samples (share %.3f), want about 30 %% of more than 1,000", cc.SaturatedSamples, cc.CoTenantSamples, share)
		}
	})
	t.Run("NaN, sentinels and impossible utilisation are dropped", func(t *testing.T) {
		r := recs["nan"].Status.ContainerRecommendations[0]
		within("nan", mib(recs["nan"]), 8000*1.15)
		if r.Target.Compute == nil || r.Target.Compute.MilliValue() != 242 { // 0.21 bucket end × 1.15, the 250 % samples dropped
			t.Errorf("nan: compute %v, want 242m", r.Target.Compute)
		}
	})
}
