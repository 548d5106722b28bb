package updater

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

func TestOOMBump(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		name, reason, msg string
		applied, want     int64
	}{
		{"OOMKilled", "OOMKilled", "", gi, bump12(gi)},
		{"small: min bump", "OOMKilled", "", 200 << 20, 300 << 20},
		{"HAMi-core reports the usage", "Error", "[HAMI-core ERROR]: Device 0 OOM 2147483648 / 1073741824", gi, bump12(2 * gi)},
		{"CUDA", "Error", "RuntimeError: CUDA error: out of memory", gi, bump12(gi)},
		{"not an OOM", "Error", "segfault", gi, -1},
		{"nothing known", "OOMKilled", "", -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			term := Termination{Reason: tc.reason, Message: tc.msg, OOM: IsOOM(tc.reason, tc.msg)}
			if got := OOMBump(term, tc.applied); got != tc.want {
				t.Errorf("bump %d, want %d", got, tc.want)
			}
		})
	}
}

// A Job-style pod (restartPolicy Never) that ended Failed with OOMKilled and restart
// count 0, and pods that ended with HAMi-core's or CUDA's message: each raises the
// memory floor to VPA's bump (the recommender honours it, the webhook writes it into the
// next pod), with one event, not one per cycle. Applies under Initial too.
func TestOOMExitsRaiseTheFloor(t *testing.T) {
	for _, tc := range []struct {
		name, reason, msg string
		exit              int32
		wantFloor         int64
	}{
		{"OOMKilled restartCount 0", "OOMKilled", "", 137, bump12(1 << 30)},
		{"HAMi-core", "Error", "Device 0 OOM 2147483648 / 1073741824", 1, bump12(2 << 30)},
		{"CUDA", "Error", "CUDA error: out of memory", 1, bump12(1 << 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi, 2, 1)
			job := f.addPod("web-abc-failed", 1, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", UID: "rs-uid"}})
			job.Spec.RestartPolicy = corev1.RestartPolicyNever
			job.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: 0,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: tc.exit, Reason: tc.reason, Message: tc.msg,
					FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}}
			f.build()
			f.run()
			f.run()
			st := f.status()
			if got := floorMemory(st.Floor, "main"); got != tc.wantFloor {
				t.Fatalf("floor %d bytes, want %d (floor %+v)", got, tc.wantFloor, st.Floor)
			}
			n := countEvents(f.events(), EventOOMBump)
			if n != 1 {
				t.Errorf("%d %s events over two cycles, want 1", n, EventOOMBump)
			}
		})
	}
}

// bump12 is used × 1.2 computed as OOMBump does (float64, truncated).
func bump12(used int64) int64 { r := OOMBumpRatio; return int64(float64(used) * r) }

// publishFloor gives the fixture's autoscaler a published rollback floor of mem for
// container main, for an hour.
func publishFloor(f *fixture, mem string) {
	f.gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{
		Memory:     q(mem),
		Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q(mem)}},
		Until:      metav1.NewTime(f.now.Add(time.Hour)), Reason: "test"}}
}

// A rollback to the floor and an out-of-memory growth are protective: they land while
// the recommender's status Lease is stale (the floor is the updater's own; an old target
// still protects a pod from what it uses now), also with urgentGrowth: false, where they
// wait for a window instead of going ahead at once (issue 14 kind 6).
func TestProtectiveGrowthLandsWithStaleRecommender(t *testing.T) {
	for _, tc := range []struct {
		name   string
		urgent bool
		oom    bool
	}{
		{"rollback, urgent growth", true, false},
		{"rollback, urgentGrowth false", false, false},
		{"out of memory, urgentGrowth false", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 1)
			f.gfa.Spec.UpdatePolicy.UrgentGrowth = &tc.urgent
			if tc.oom {
				f.setTarget("1200Mi", "1100Mi", "2Gi") // 17 % above; inside the bounds
				f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, LastTerminationState: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "CUDA out of memory", FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
			} else {
				publishFloor(f, "2Gi")
			}
			f.cfg.RecommenderLeaseMaxAge = 10 * time.Minute // no recommender Lease at all: stale
			f.build()
			f.run()
			if tc.oom {
				f.run() // the exit's floor is published first (awaiting-floor)
			}
			if live := f.livePods(); len(live) != 1 {
				st := f.status()
				t.Fatalf("pods %v: want one replaced (blocked %s: %s)", live, st.BlockedReason, st.BlockedMessage)
			}
		})
	}
}

// TestRollbackLandsWithoutRecommendation: a published floor of 2Gi above pods of 1Gi
// whose recommendation stays at 1Gi (the recommender has not caught up) still replaces
// a pod, urgently, outside any resize window (issue 14 kind 6).
func TestRollbackLandsWithoutRecommendation(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 1)
	f.gfa.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "0 0 1 1 *", Duration: metav1.Duration{Duration: time.Minute}}}
	publishFloor(f, "2Gi")
	f.build()
	f.run()
	if live := f.livePods(); len(live) != 1 {
		t.Fatalf("pods %v: want one replaced to reach the floor", live)
	}
	evs := f.events()
	if !hasEvent(evs, "roll back to the floor") || !hasEvent(evs, "below rollback floor 2Gi") {
		t.Errorf("events %v: want an eviction to roll back to the 2Gi floor", evs)
	}
}

// TestRepeatedOOMAtTheFloorRaisesIt: a pod already at the 2Gi floor exits out of memory:
// the floor rises to VPA's bump (2.4Gi) and, once that is published for the webhook (next
// cycle, not before), the pod is replaced to get it, with the recommendation still at 1Gi.
func TestRepeatedOOMAtTheFloorRaisesIt(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 2)
	publishFloor(f, "2Gi")
	cudaOOMExit(f.pods[0], f.now)
	f.build()
	f.run()
	st := f.status()
	want := bump12(2 << 30)
	if got := floorMemory(st.Floor, "main"); got != want {
		t.Fatalf("floor %d bytes, want %d (2Gi × 1.2)", got, want)
	}
	if len(f.livePods()) != 2 {
		t.Fatal("replaced before the raised floor was published: the replacement would get the old one")
	}
	pending := false
	for _, u := range st.Updates {
		pending = pending || (u.Pod == "web-abc-0" && u.SkipReason == SkipAwaitingFloor)
	}
	if !pending {
		t.Errorf("updates %+v: want web-abc-0 %s", st.Updates, SkipAwaitingFloor)
	}
	f.run()
	if live := f.livePods(); live["web-abc-0"] || len(live) != 1 {
		t.Fatalf("pods %v: want web-abc-0 replaced once the floor is published", live)
	}
	if got := floorMemory(f.status().Floor, "main"); got != want {
		t.Errorf("floor raised again by the same exit: %d, want %d", got, want)
	}
	if evs := f.events(); !hasEvent(evs, "roll back to the floor") {
		t.Errorf("events %v", evs)
	}
}

// An out-of-memory exit at a whole GPU raises the floor above one GPU (19.2Gi of a
// 16Gi GPU), which no pod can get: pods at one GPU are in date, not replaced urgently
// every cycle by pods at one GPU again, while a pod below one GPU still grows to it.
func TestFloorAboveOneGPUReplacesNoPodAtOneGPU(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 16)
	f.cfg.Backend.GPUMemoryBytes = 16 << 30
	f.setTarget("12Gi", "10Gi", "16Gi")
	f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, LastTerminationState: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "CUDA out of memory", FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
	f.build()
	for range 3 {
		f.run()
	}
	if got := floorMemory(f.status().Floor, "main"); got != bump12(16<<30) {
		t.Fatalf("floor %d, want %d", got, bump12(16<<30))
	}
	if live := f.livePods(); len(live) != 3 {
		t.Fatalf("pods %v: pods at one GPU replaced towards a floor above one GPU", live)
	}

	// A pod holding less than one GPU grows to one GPU.
	g := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 8)
	g.cfg.Backend.GPUMemoryBytes = 16 << 30
	g.setTarget("8Gi", "6Gi", "10Gi")
	publishFloor(g, "20Gi")
	g.build()
	g.run()
	if live := g.livePods(); len(live) != 1 {
		t.Fatalf("pods %v: want one pod below one GPU grown to it", live)
	}
}

// A pod holding a fraction exits out of memory while its recommendation is below the
// webhook's --min-confidence (a source that fell back to GPU_UTIL, a history cut
// short): the webhook admits its replacement unchanged, with the whole GPU, so
// replacing it is growth, and it is replaced (before: SkipLowConfidence, and the pod
// went on exiting out of memory at the fraction it held). Without the exit nothing is
// replaced for the confidence alone.
func TestOOMUnderLowConfidenceGetsTheWholeGPU(t *testing.T) {
	for _, oom := range []bool{true, false} {
		t.Run(fmt.Sprintf("oom=%v", oom), func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 1)
			f.setTarget("1Gi", "900Mi", "2Gi")
			f.gfr.Status.ConfidencePercent = ptr.To[int32](20)
			if oom {
				f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, LastTerminationState: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "CUDA out of memory", FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
			}
			name := f.pods[0].Name
			f.build()
			for range 3 {
				f.run()
			}
			st := f.status()
			if live := f.livePods(); live[name] == oom {
				t.Fatalf("pods %v: %s replaced %v, want %v (blocked %s: %s; updates %+v)", live, name, !live[name], oom, st.BlockedReason, st.BlockedMessage, st.Updates)
			}
			if oom {
				return
			}
			if len(st.Updates) == 0 {
				t.Fatal("no pending update: the skip is not reported")
			}
			for _, u := range st.Updates {
				if u.SkipReason != SkipLowConfidence {
					t.Errorf("%s: skip %q (%s), want %s", u.Pod, u.SkipReason, u.SkipMessage, SkipLowConfidence)
				}
			}
		})
	}
}

// --gpu-memory is the smallest GPU the pods may land on, so a pod holding a fraction
// gpufrac wrote at one such GPU may sit on a larger one. When it exits out of memory and
// the webhook admits its replacement unchanged — a memory target above one GPU (the
// recommender raises it to the floor the exit set), or a recommendation below
// --min-confidence — it is replaced: unchanged, it gets the whole GPU it lands on
// (before: in date at one GPU, or the workload skipped as no fraction below one GPU was
// held, and the pod went on exiting out of memory at --gpu-memory's size on an 80Gi
// GPU). A pod at one GPU that did not exit, and one holding a whole GPU, are not
// replaced. Over several GPU sizes.
func TestOOMAtOneGPUFractionGetsTheWholeGPU(t *testing.T) {
	for _, gpuGi := range []int64{16, 24, 80} {
		for _, tc := range []struct {
			name          string
			lowConfidence bool
			whole         bool // the pods hold a whole GPU (no record, no gpumem)
			oom           bool
			replaced      bool
		}{
			{"target above one GPU, out of memory", false, false, true, true},
			{"target above one GPU, no exit", false, false, false, false},
			{"target above one GPU, whole GPU, out of memory", false, true, true, false},
			{"low confidence, out of memory", true, false, true, true},
			{"low confidence, no exit", true, false, false, false},
		} {
			t.Run(fmt.Sprintf("%dGi/%s", gpuGi, tc.name), func(t *testing.T) {
				f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, gpuGi)
				f.cfg.Backend.GPUMemoryBytes = gpuGi << 30
				if tc.lowConfidence {
					f.setTarget(fmt.Sprintf("%dGi", gpuGi/2), "1Gi", fmt.Sprintf("%dGi", gpuGi))
					f.gfr.Status.ConfidencePercent = ptr.To[int32](20)
				} else {
					above := fmt.Sprintf("%dMi", bump12(gpuGi<<30)>>20) // the floor an exit at one GPU sets, in the recommendation
					f.setTarget(above, above, above)
				}
				if tc.whole {
					for _, p := range f.pods {
						delete(p.Annotations, gpufracv1.AnnotationApplied)
					}
				}
				if tc.oom {
					f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 3, LastTerminationState: corev1.ContainerState{
						Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "CUDA out of memory", FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
				}
				name := f.pods[0].Name
				f.build()
				for range 3 {
					f.run()
				}
				live := f.livePods()
				if live[name] == tc.replaced {
					st := f.status()
					t.Fatalf("%s replaced %v, want %v (blocked %s: %s; updates %+v)", name, !live[name], tc.replaced, st.BlockedReason, st.BlockedMessage, st.Updates)
				}
				if !live[f.pods[1].Name] {
					t.Errorf("%s replaced: it holds one GPU and did not exit", f.pods[1].Name)
				}
			})
		}
	}
}

// A pod whose memory is its template's own HAMi gpumem (backend fields, no applied
// record) is not replaced for an exit at one GPU: its replacement would get the same.
func TestOOMAtTemplatesOwnGPUMemStays(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 24)
	f.cfg.Backend.GPUMemoryBytes = 24 << 30
	above := fmt.Sprintf("%dMi", bump12(24<<30)>>20)
	f.setTarget(above, above, above)
	for _, p := range f.pods {
		delete(p.Annotations, gpufracv1.AnnotationApplied)
		p.Spec.Containers[0].Resources.Limits = limits("nvidia.com/gpu", "1", "nvidia.com/gpumem", "24576")
	}
	f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 3, LastTerminationState: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "CUDA out of memory", FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
	f.build()
	for range 3 {
		f.run()
	}
	if live := f.livePods(); len(live) != 2 {
		t.Fatalf("pods %v: a pod at its template's own gpumem replaced", live)
	}
}

// TestFloorCoveredByTargetIsNotAwaited: a pod of 1Gi exits out of memory while the
// recommendation has already grown past the floor its exit raises (2Gi over a floor of
// 1.2Gi): the webhook writes 2Gi into the replacement whether or not the floor is
// published, so the growth goes ahead in the cycle that raises the floor (before: held a
// cycle as awaiting-floor). A recommendation below the new floor (1100Mi) still waits
// for the floor to be published, else the webhook would write 1100Mi.
func TestFloorCoveredByTargetIsNotAwaited(t *testing.T) {
	for _, tc := range []struct {
		name, target, lower, upper string
		wantAwait                  bool
	}{
		{"target above the new floor", "2Gi", "1536Mi", "3Gi", false},
		{"target below the new floor", "1100Mi", "900Mi", "1536Mi", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 1)
			f.setTarget(tc.target, tc.lower, tc.upper)
			cudaOOMExit(f.pods[0], f.now)
			f.build()
			f.run()
			st := f.status()
			if got := floorMemory(st.Floor, "main"); got != bump12(1<<30) {
				t.Fatalf("floor %d bytes, want %d", got, bump12(1<<30))
			}
			awaiting := false
			for _, u := range st.Updates {
				awaiting = awaiting || u.SkipReason == SkipAwaitingFloor
			}
			replaced := !f.livePods()["web-abc-0"]
			if awaiting != tc.wantAwait || replaced == tc.wantAwait {
				t.Errorf("awaiting-floor %v, web-abc-0 replaced %v in the cycle raising the floor; want awaiting %v (updates %+v)", awaiting, replaced, tc.wantAwait, st.Updates)
			}
		})
	}
}

// AwaitsFloor, the rule: a container is awaited where the floor is above both what is
// published and what its target writes by itself (the need, not a young share above
// it), at most one GPU (a floor above one GPU is covered by a target of one GPU), for
// memory and compute; a container without a target, or whose resource gpufrac does not
// control, is awaited.
func TestAwaitsFloor(t *testing.T) {
	const gi = int64(1) << 30
	now := time.Now()
	floor := func(mem, milli string) *gpufracv1.UpdaterFloor {
		c := gpufracv1.ContainerAllocation{ContainerName: "main"}
		if mem != "" {
			c.Memory = q(mem)
		}
		if milli != "" {
			c.Compute = q(milli)
		}
		return &gpufracv1.UpdaterFloor{Containers: []gpufracv1.ContainerAllocation{c}, Until: metav1.NewTime(now.Add(time.Hour))}
	}
	unpublished := &gpufracv1.GPUFractionAutoscaler{}
	published := func(f *gpufracv1.UpdaterFloor) *gpufracv1.GPUFractionAutoscaler {
		return &gpufracv1.GPUFractionAutoscaler{Status: gpufracv1.GPUFractionAutoscalerStatus{Updater: &gpufracv1.UpdaterStatus{Floor: f}}}
	}
	target := func(mem, milli int64) map[string]contract.Target {
		return map[string]contract.Target{"main": {Container: "main", Memory: mem, Compute: milli, ControlsMemory: mem >= 0, ControlsCompute: milli >= 0}}
	}
	// A young workload's target at its share (4Gi, its upper bound: the webhook writes
	// it with the observed-peak request) whose need is 1Gi: under a 2Gi floor the
	// published floor drops that request (the request must hold the floor), so the
	// replacement still waits for it.
	gfr := &gpufracv1.GPUFractionRecommendation{}
	gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", YoungMarginPercent: 20,
		Target: gpufracv1.GPUResources{Memory: q("1Gi")}, UpperBound: gpufracv1.GPUResources{Memory: q("4Gi")}, MemoryLimit: q("4Gi")}}
	young := contract.TargetsOf(&gpufracv1.GPUFractionAutoscaler{}, gfr)
	if yt := young["main"]; !yt.YoungShare || yt.Memory != 4*gi || yt.NeedMemory() != gi || !yt.ControlsMemory {
		t.Fatalf("young target %+v: want its 4Gi share, need 1Gi", yt)
	}
	for _, tc := range []struct {
		name    string
		floor   *gpufracv1.UpdaterFloor
		pub     *gpufracv1.GPUFractionAutoscaler
		targets map[string]contract.Target
		gpu     int64
		want    bool
	}{
		{"no floor", nil, unpublished, target(gi, -1), 16 * gi, false},
		{"published", floor("2Gi", ""), published(floor("2Gi", "")), target(gi, -1), 16 * gi, false},
		{"published lower", floor("2Gi", ""), published(floor("1Gi", "")), target(gi, -1), 16 * gi, true},
		{"target at the floor", floor("2Gi", ""), unpublished, target(2*gi, -1), 16 * gi, false},
		{"target below", floor("2Gi", ""), unpublished, target(2*gi-1, -1), 16 * gi, true},
		{"floor above one GPU, target one GPU", floor("20Gi", ""), unpublished, target(16*gi, -1), 16 * gi, false},
		{"memory not controlled", floor("2Gi", ""), unpublished, target(-1, 500), 16 * gi, true},
		{"no target", floor("2Gi", ""), unpublished, nil, 16 * gi, true},
		{"compute covered", floor("", "400m"), unpublished, target(gi, 400), 16 * gi, false},
		{"compute below", floor("", "400m"), unpublished, target(gi, 300), 16 * gi, true},
		{"compute not controlled", floor("", "400m"), unpublished, target(gi, -1), 16 * gi, true},
		{"memory covered, compute below", floor("2Gi", "400m"), unpublished, target(4*gi, 300), 16 * gi, true},
		{"young share above, need below", floor("2Gi", ""), unpublished, young, 16 * gi, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AwaitsFloor(tc.floor, tc.pub, tc.targets, tc.gpu, now)
			if (len(got) > 0) != tc.want {
				t.Errorf("AwaitsFloor %v, want awaited %v", got, tc.want)
			}
		})
	}
}

// TestOOMExitStampedBeforeThePodByANodeClockBehind: a pod created an hour ago (the API
// server's clock) restarted after an out-of-memory exit at 1Gi that its node, whose
// clock is two days behind, stamped two days back. The run ended after the pod was
// created, so it counts from the pod's creation: the floor rises to the bump (1Gi +
// 20 %) until the creation + --floor-duration (24h). Before, the exit read as older
// than the floor's duration and no floor was raised: the next pods got the 1Gi the pod
// ran out of memory at.
func TestOOMExitStampedBeforeThePodByANodeClockBehind(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
	f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, LastTerminationState: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: metav1.NewTime(f.now.Add(-48 * time.Hour))}}}}
	f.build()
	f.u.Now = func() time.Time { return f.now }
	f.run()
	st := f.status()
	want := OOMBump(Termination{OOM: true}, 1<<30)
	if got := floorMemory(st.Floor, "main"); got != want {
		t.Fatalf("floor %d, want %d (the exit's bump)", got, want)
	}
	if until, wantUntil := st.Floor.Until.Time, f.pods[0].CreationTimestamp.Add(24*time.Hour); until.Sub(wantUntil).Abs() > time.Second {
		t.Errorf("floor until %v, want the pod's creation + 24h %v", until, wantUntil)
	}
	if ts := Terminations(f.pods[0]); len(ts) != 1 || !ts[0].FinishedAt.Equal(f.pods[0].CreationTimestamp.Time) {
		t.Errorf("terminations %+v, want one at the pod's creation", ts)
	}
}

// cudaOOMExit gives p's container "main" a last termination a minute before now whose
// message is CUDA's out-of-memory error (exit code 1, not OOMKilled), the pod Ready again.
func cudaOOMExit(p *corev1.Pod, now time.Time) {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, Ready: true,
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			Message: "RuntimeError: CUDA error: out of memory", FinishedAt: metav1.NewTime(now.Add(-time.Minute))}}}}
}
