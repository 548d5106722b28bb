package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// sampleKey identifies one sample by metric name, the labels that name the object
// (namespace, pod or replicaset, container) and Unix milliseconds.
type sampleKey struct {
	name, ns, obj, container string
	ms                       int64
}

// expectedSamples computes every sample WriteOpenMetrics must emit for tr.
func expectedSamples(tr Trace, capBytes float64) map[sampleKey]float64 {
	want := map[sampleKey]float64{}
	for _, p := range tr.Pods {
		for _, pt := range p.Memory {
			ms := pt.T.UnixMilli()
			want[sampleKey{MetricFBUsed, p.Namespace, p.Pod, p.Container, ms}] = pt.V / (1 << 20)
			want[sampleKey{MetricFBFree, p.Namespace, p.Pod, p.Container, ms}] = (capBytes - pt.V) / (1 << 20)
			want[sampleKey{MetricPodOwner, p.Namespace, p.Pod, "", ms}] = 1
			want[sampleKey{MetricReplicaSetOwner, p.Namespace, p.ReplicaSet, "", ms}] = 1
		}
		for _, pt := range p.Compute {
			ms := pt.T.UnixMilli()
			want[sampleKey{MetricGPUUtil, p.Namespace, p.Pod, p.Container, ms}] = pt.V * 100
			want[sampleKey{MetricPodOwner, p.Namespace, p.Pod, "", ms}] = 1
			want[sampleKey{MetricReplicaSetOwner, p.Namespace, p.ReplicaSet, "", ms}] = 1
		}
		for _, pt := range p.LatencyP95 {
			want[sampleKey{MetricLatencyP95, p.Namespace, p.Pod, p.Container, pt.T.UnixMilli()}] = pt.V
		}
	}
	return want
}

var uuidRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// checkLabels checks the label set of one parsed sample and returns its key.
func checkLabels(t *testing.T, name string, l map[string]string, ms int64, modelName string) sampleKey {
	t.Helper()
	var want []string
	k := sampleKey{name: name, ns: l["namespace"], ms: ms}
	switch name {
	case MetricFBUsed, MetricFBFree, MetricGPUUtil:
		want = []string{"gpu", "UUID", "device", "modelName", "Hostname", "container", "namespace", "pod"}
		if l["gpu"] != "0" || !uuidRE.MatchString(l["UUID"]) || l["modelName"] != modelName || l["Hostname"] == "" || l["device"] != "nvidia0" {
			t.Errorf("%s labels %v", name, l)
		}
		k.obj, k.container = l["pod"], l["container"]
	case MetricLatencyP95:
		want = []string{"namespace", "pod", "container"}
		k.obj, k.container = l["pod"], l["container"]
	case MetricPodOwner:
		want = []string{"namespace", "pod", "uid", "owner_kind", "owner_name", "owner_is_controller"}
		rs := l["pod"][:strings.LastIndexByte(l["pod"], '-')]
		if l["owner_kind"] != "ReplicaSet" || l["owner_name"] != rs || l["owner_is_controller"] != "true" || len(l["uid"]) != 36 {
			t.Errorf("%s labels %v", name, l)
		}
		k.obj = l["pod"]
	case MetricReplicaSetOwner:
		want = []string{"namespace", "replicaset", "owner_kind", "owner_name", "owner_is_controller"}
		if l["owner_kind"] != "Deployment" || !strings.HasPrefix(l["replicaset"], l["owner_name"]+"-") || l["owner_is_controller"] != "true" {
			t.Errorf("%s labels %v", name, l)
		}
		k.obj = l["replicaset"]
	default:
		t.Errorf("unexpected metric %s", name)
	}
	if len(l) != len(want) {
		t.Errorf("%s has labels %v, want %v", name, l, want)
	}
	for _, n := range want {
		if _, ok := l[n]; !ok {
			t.Errorf("%s lacks label %s: %v", name, n, l)
		}
	}
	return k
}

func compareSamples(t *testing.T, got, want map[sampleKey]float64) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing sample %+v", k)
		} else if math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("sample %+v = %v, want %v", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected sample %+v", k)
		}
	}
}

// TestOpenMetricsRoundTrip parses the output with prometheus/common's OpenMetrics
// 1.0 parser and compares every sample.
func TestOpenMetricsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		tr   Trace
		opts OpenMetricsOptions
	}{
		{"tiny", tinyTrace(), OpenMetricsOptions{}},
		// prometheus/common's ABNF parser takes milliseconds a line: keep it small.
		{"synthetic", Synthesize(SynthOptions{Workloads: 2, PodsPerWorkload: 2, Duration: 10 * time.Minute, Seed: 7, End: testEnd}),
			OpenMetricsOptions{GPUMemoryBytes: 141e9, ModelName: "NVIDIA H200"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteOpenMetrics(&buf, c.tr, c.opts); err != nil {
				t.Fatal(err)
			}
			checkLayout(t, buf.String())
			capBytes, model := c.opts.GPUMemoryBytes, c.opts.ModelName
			if capBytes == 0 {
				capBytes, model = DefaultGPUMemoryBytes, DefaultGPUModelName
			}
			got := map[sampleKey]float64{}
			dec := expfmt.NewDecoder(&buf, expfmt.FmtOpenMetrics_1_0_0)
			for {
				var mf dto.MetricFamily
				err := dec.Decode(&mf)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if mf.GetType() != dto.MetricType_GAUGE {
					t.Errorf("%s is %v, want gauge", mf.GetName(), mf.GetType())
				}
				for _, m := range mf.GetMetric() {
					l := map[string]string{}
					for _, lp := range m.GetLabel() {
						l[lp.GetName()] = lp.GetValue()
					}
					k := checkLabels(t, mf.GetName(), l, m.GetTimestampMs(), model)
					if _, dup := got[k]; dup {
						t.Errorf("duplicate sample %+v", k)
					}
					got[k] = m.GetGauge().GetValue()
				}
			}
			compareSamples(t, got, expectedSamples(c.tr, capBytes))
		})
	}
}

// checkLayout checks the rules promtool relies on: one TYPE per family before its
// samples, a family's samples together, each series in time order, "# EOF" last.
func checkLayout(t *testing.T, text string) {
	t.Helper()
	if !strings.HasSuffix(text, "\n# EOF\n") {
		t.Error("output does not end with # EOF")
	}
	typed := map[string]bool{}
	done := map[string]bool{}
	cur := ""
	last := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			if typed[f[2]] {
				t.Errorf("TYPE of %s twice", f[2])
			}
			typed[f[2]] = true
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexByte(line, '{')]
		if !typed[name] {
			t.Fatalf("sample of %s before its TYPE", name)
		}
		if name != cur {
			if done[name] {
				t.Fatalf("samples of %s are not together", name)
			}
			done[cur] = true
			cur = name
		}
		sp := strings.LastIndexByte(line, ' ')
		ts, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("timestamp of %q: %v", line, err)
		}
		series := line[:strings.IndexByte(line, '}')+1]
		if prev, ok := last[series]; ok && ts <= prev {
			t.Fatalf("series %s not in time order", series)
		}
		last[series] = ts
	}
}

// TestOpenMetricsPromtool backfills the output into a TSDB with the real promtool
// and compares the dumped samples (skipped without promtool).
func TestOpenMetricsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	tr := tinyTrace()
	syn := Synthesize(SynthOptions{Workloads: 2, PodsPerWorkload: 2, Duration: 5 * time.Hour, Seed: 3, End: testEnd})
	for i := range syn.Pods {
		syn.Pods[i].Namespace = "synth"
	}
	tr.Pods = append(tr.Pods, syn.Pods...)
	dir := t.TempDir()
	om := filepath.Join(dir, "in.om")
	var buf bytes.Buffer
	if err := WriteOpenMetrics(&buf, tr, OpenMetricsOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(om, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "db")
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, db).CombinedOutput(); err != nil {
		t.Fatalf("promtool create-blocks-from: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(db, "wal"), 0o755); err != nil { // dump opens the WAL
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "tsdb", "dump", db).Output()
	if err != nil {
		t.Fatalf("promtool tsdb dump: %v", err)
	}
	got := map[sampleKey]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		end := strings.LastIndexByte(line, '}')
		if !strings.HasPrefix(line, "{") || end < 0 {
			t.Fatalf("dump line %q", line)
		}
		l := map[string]string{}
		for _, kv := range strings.Split(line[1:end], ", ") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		name := l["__name__"]
		delete(l, "__name__")
		var v float64
		var ms int64
		if _, err := fmt.Sscan(line[end+1:], &v, &ms); err != nil {
			t.Fatalf("dump line %q: %v", line, err)
		}
		got[checkLabels(t, name, l, ms, DefaultGPUModelName)] = v
	}
	want := expectedSamples(tr, DefaultGPUMemoryBytes)
	compareSamples(t, got, want)
	t.Logf("promtool backfilled %d samples", len(got))
}

func TestWriteOpenMetricsErrors(t *testing.T) {
	tr := tinyTrace()
	err := WriteOpenMetrics(io.Discard, tr, OpenMetricsOptions{GPUMemoryBytes: 16 << 30})
	want := "pod ns/" + tr.Pods[1].Pod + " uses 20480 MiB GPU memory at 2026-03-01T11:57:00Z, more than the GPU capacity 16384 MiB (raise the GPU memory capacity, gpufrac trace --gpu-memory)"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
	tr.Pods[0].Compute[2].T = tr.Pods[0].Compute[1].T
	if err := WriteOpenMetrics(io.Discard, tr, OpenMetricsOptions{}); err == nil || !strings.Contains(err.Error(), "compute sample 2 at 2026-03-01T11:58:00Z: times not strictly increasing") {
		t.Errorf("error %v for unsorted compute", err)
	}
	tr = tinyTrace()
	tr.Pods[2].Compute[0].V = 1.5
	if err := WriteOpenMetrics(io.Discard, tr, OpenMetricsOptions{}); err == nil || !strings.Contains(err.Error(), "value 1.5 out of range") {
		t.Errorf("error %v for compute 1.5", err)
	}
}
