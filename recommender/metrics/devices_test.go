package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// The agent's word on a pod's GPUs stands over an annotation's, in either order; a
// series contradicts it when it names another GPU or another MIG instance of the GPU,
// never when it names no device or the authority does not say the instance.
func TestAllocationContradicts(t *testing.T) {
	a := Allocation{}
	a.Add("ml", "p", "hami.io/vgpu-devices-allocated", "GPU-x", "")
	a.Add("ml", "p", AllocatedByAgent, "GPU-b", "3")
	a.Add("ml", "p", "hami.io/vgpu-devices-allocated", "GPU-y", "")
	a.Add("ml", "q", "hami.io/vgpu-devices-allocated", "GPU-b", "")
	if got := a[[2]string{"ml", "p"}]; got.By != AllocatedByAgent || got.String() != "GPU-b/3" {
		t.Fatalf("p: %s by %q, want GPU-b/3 by the agent only", got, got.By)
	}
	id := func(pod string) ContainerID { return ContainerID{Namespace: "ml", Pod: pod, Container: "main"} }
	for _, c := range []struct {
		pod    string
		labels model.Metric
		bad    bool
	}{
		{"p", model.Metric{"UUID": "GPU-b", MIGInstanceLabel: "3"}, false},
		{"p", model.Metric{"UUID": "GPU-b", MIGInstanceLabel: "4"}, true}, // another instance
		{"p", model.Metric{"UUID": "GPU-a"}, true},
		{"p", model.Metric{"gpu_uuid": "GPU-a"}, true}, // any UUID spelling
		{"p", model.Metric{"gpu": "0"}, false},         // names no device
		{"q", model.Metric{"device_uuid": "GPU-b", MIGInstanceLabel: "5"}, false},
		{"q", model.Metric{"deviceuuid": "GPU-c"}, true},
		{"r", model.Metric{"UUID": "GPU-z"}, false}, // no authority for the pod
	} {
		if _, _, bad := a.contradicts(id(c.pod), c.labels); bad != c.bad {
			t.Errorf("%s %v: contradicts %v, want %v", c.pod, c.labels, bad, c.bad)
		}
	}
}

// A live pod's allocation (an annotation, From its creation) speaks of that pod only:
// a series of its name on another GPU is an earlier pod's (a StatefulSet replica
// replaced onto another GPU) in every window that ends at or before the creation, and
// in a window that straddles it (with Prometheus' lookback) where the container reports
// on its own GPU at that time; every other sample on the other GPU is dropped. An
// authority that speaks of every pod of the name (the agent's, From zero) is checked
// on every sample.
func TestAllocationSpeaksOfItsPodOnly(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 11, 40, 0, 0, time.UTC)
	at := func(d time.Duration) model.Time { return model.TimeFromUnixNano(t0.Add(d).UnixNano()) }
	type pt struct {
		at time.Duration
		v  float64
	}
	stream := func(pod, uuid string, pts ...pt) *model.SampleStream {
		s := &model.SampleStream{Metric: model.Metric{"namespace": "ml", "pod": model.LabelValue(pod), "container": "main", "UUID": model.LabelValue(uuid)}}
		for _, p := range pts {
			s.Values = append(s.Values, model.SamplePair{Timestamp: at(p.at), Value: model.SampleValue(p.v)})
		}
		return s
	}
	h := time.Hour
	for _, tc := range []struct {
		name   string
		from   time.Time // the allocation's From; zero: the agent's
		window time.Duration
		series []*model.SampleStream
		want   []pt // the container's samples
		wrong  bool // WrongDevice said
	}{
		{"replaced, hourly peaks", t0, h, []*model.SampleStream{
			stream("p", "GPU-1", pt{-h, 20}, pt{0, 20}, pt{h, 20}, pt{2 * h, 20}),
			stream("p", "GPU-2", pt{h, 4}, pt{2 * h, 4})},
			[]pt{{-h, 20}, {0, 20}, {h, 20}, {2 * h, 4}}, true},
		{"replaced, the earlier pod gone in time", t0, h, []*model.SampleStream{
			stream("p", "GPU-1", pt{-2 * h, 20}, pt{-h, 20}, pt{h, 20}),
			stream("p", "GPU-2", pt{h, 4}, pt{2 * h, 4})},
			[]pt{{-2 * h, 20}, {-h, 20}, {h, 20}, {2 * h, 4}}, false},
		{"replaced, minute means", t0, time.Minute, []*model.SampleStream{
			stream("p", "GPU-1", pt{-time.Minute, 0.3}, pt{0, 0.3}, pt{5 * time.Minute, 0.3}, pt{7 * time.Minute, 0.3}),
			stream("p", "GPU-2", pt{5 * time.Minute, 0.1}, pt{7 * time.Minute, 0.1})},
			[]pt{{-time.Minute, 0.3}, {0, 0.3}, {5 * time.Minute, 0.3}, {7 * time.Minute, 0.1}}, true},
		{"own series on the wrong GPU only", t0, h, []*model.SampleStream{
			stream("p", "GPU-1", pt{h, 0}, pt{2 * h, 0})},
			nil, true},
		{"own series on the wrong GPU, straddling, own GPU silent then", t0, h, []*model.SampleStream{
			stream("p", "GPU-1", pt{h, 0}, pt{2 * h, 0}),
			stream("p", "GPU-2", pt{2 * h, 4})},
			[]pt{{2 * h, 4}}, true},
		{"the agent's word: every pod of the name", time.Time{}, h, []*model.SampleStream{
			stream("p", "GPU-1", pt{-h, 20}, pt{0, 20}, pt{h, 20}),
			stream("p", "GPU-2", pt{h, 4}, pt{2 * h, 4})},
			[]pt{{h, 4}, {2 * h, 4}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Allocation{}
			a.Add("ml", "p", "hami.io/vgpu-devices-allocated", "GPU-2", "")
			al := a[[2]string{"ml", "p"}]
			al.From = tc.from
			a[[2]string{"ml", "p"}] = al
			r := &Reader{Labels: DefaultLabels, Device: []string{"UUID"}, Allocation: a}
			out := r.decode(SignalMemory, model.Matrix(tc.series), nil, tc.window)
			var got []pt
			wrong := false
			for _, s := range out {
				wrong = wrong || s.WrongDevice != ""
				for _, p := range s.Samples {
					got = append(got, pt{p.Time.Sub(t0), p.Value})
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || wrong != tc.wrong {
				t.Errorf("samples %v, WrongDevice %v; want %v, %v", got, wrong, tc.want, tc.wrong)
			}
			for _, s := range out {
				if s.Devices > 1 && s.MultiDeviceAt.After(tc.from.Add(tc.window+AgentCoverage)) {
					t.Errorf("two GPUs at %s, after the earlier pod's last window", s.MultiDeviceAt)
				}
			}
		})
	}
}
