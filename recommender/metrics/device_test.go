package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Kind 13 (issue 13): every spelling of the device label (UUID, gpu_uuid, device_uuid,
// deviceuuid) feeds shared-device detection: two pods that carry the same memory value
// on one device at the same times are marked as copies, whatever the spelling, and
// pods on different devices are not — here with a reader whose own device labels
// (those of another source) name none of the spellings but UUID.
func TestEverySpellingFeedsSharedDetection(t *testing.T) {
	ctx := context.Background()
	for _, label := range DeviceUUIDLabels {
		t.Run(label, func(t *testing.T) {
			prom := promtest.New(t)
			r := &Reader{API: prom.API(t), Labels: DefaultLabels, Device: []string{"UUID", MIGInstanceLabel}}
			series := func(pod, dev string) map[string]string {
				return map[string]string{"__name__": "gpu_memory_test_bytes", "namespace": "ml", "pod": pod, label: dev}
			}
			start := t0.Add(30 * time.Second)
			prom.Add(t, series("a", "GPU-1"), start, 30*time.Second, promtest.Repeat(15866*MiB, 10)...)
			prom.Add(t, series("b", "GPU-1"), start, 30*time.Second, promtest.Repeat(15866*MiB, 10)...)
			prom.Add(t, series("c", "GPU-2"), start, 30*time.Second, promtest.Repeat(15866*MiB, 10)...)
			got, err := r.Range(ctx, SignalMemory, `gpu_memory_test_bytes`, start, start.Add(4*time.Minute), 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			shared := map[string]int{}
			for _, s := range got {
				shared[s.ID.Pod] = s.SharedSamples
			}
			if shared["a"] != 9 || shared["b"] != 9 {
				t.Errorf("%s: shared samples a=%d b=%d, want 9 each (one device value copied to two pods)", label, shared["a"], shared["b"])
			}
			if shared["c"] != 0 {
				t.Errorf("%s: pod c alone on GPU-2 marked shared (%d)", label, shared["c"])
			}
		})
	}
}

// TestDeviceLoadMarksSaturation: a compute sample taken while other pods were on the
// container's GPU carries the device's load (Series.DeviceLoad), saturated where the
// GPU's activity was at least SaturatedActivity. The device's activity is the value
// dcgm-exporter copies to each pod of a shared GPU, or the sum of the agent's
// per-process values; a pod alone on its GPU carries none.
func TestDeviceLoadMarksSaturation(t *testing.T) {
	prom := promtest.New(t)
	r := &Reader{API: prom.API(t), Labels: DefaultLabels, Device: []string{"UUID", MIGInstanceLabel}}
	series := func(pod, dev, src string) map[string]string {
		return map[string]string{"__name__": "gpu_compute_test", "namespace": "ml", "pod": pod, "container": "main", "UUID": dev, SourceLabel: src}
	}
	start := t0.Add(time.Minute)
	const agent = "gpufrac_pod_gpu_sm_utilization_ratio"
	// GPU-1: dcgm-exporter copies the device's value to both pods.
	prom.Add(t, series("a", "GPU-1", DCGMGREngineActive), start, time.Minute, 0.97, 0.5, 0.96)
	prom.Add(t, series("b", "GPU-1", DCGMGREngineActive), start, time.Minute, 0.97, 0.5, 0.96)
	// GPU-2: the agent measures each pod; the device's activity is their sum.
	prom.Add(t, series("c", "GPU-2", agent), start, time.Minute, 0.6, 0.3, 0.55)
	prom.Add(t, series("d", "GPU-2", agent), start, time.Minute, 0.4, 0.2, 0.35)
	// GPU-4: an idle shared GPU: its samples are shared, none saturated.
	prom.Add(t, series("f", "GPU-4", DCGMGREngineActive), start, time.Minute, 0, 0, 0)
	prom.Add(t, series("g", "GPU-4", DCGMGREngineActive), start, time.Minute, 0, 0, 0)
	// GPU-3: one pod, busy.
	prom.Add(t, series("e", "GPU-3", DCGMGREngineActive), start, time.Minute, 1, 1, 1)
	got, err := r.Range(context.Background(), SignalCompute, `gpu_compute_test`, start, start.Add(2*time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]bool{"a": {true, false, true}, "b": {true, false, true}, "c": {true, false, false}, "d": {true, false, false},
		"e": nil, "f": {false, false, false}, "g": {false, false, false}}
	for _, s := range got {
		var sat []bool
		for i, l := range s.DeviceLoad {
			if !l.Time.Equal(s.Samples[i].Time) {
				t.Errorf("pod %s: device load %d at %s, its sample at %s", s.ID.Pod, i, l.Time, s.Samples[i].Time)
			}
			sat = append(sat, l.Saturated)
		}
		if fmt.Sprint(sat) != fmt.Sprint(want[s.ID.Pod]) {
			t.Errorf("pod %s: saturated %v, want %v", s.ID.Pod, sat, want[s.ID.Pod])
		}
		delete(want, s.ID.Pod)
	}
	if len(want) > 0 {
		t.Errorf("pods not read: %v", want)
	}
}
