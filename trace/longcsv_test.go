package trace

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

const longHeader = "timestamp,namespace,pod,container,memory_bytes,compute_ratio\n"

func TestReadLongCSVBadInput(t *testing.T) {
	pod := "web-" + TemplateHash("x") + "-" + PodSuffix("x")
	row := func(ts, mem, cpu string) string { return ts + ",ns," + pod + ",main," + mem + "," + cpu + "\n" }
	cases := []struct {
		name, in, wantErr string
	}{
		{"missing column", "timestamp,namespace,pod,container,memory_bytes\n1,ns," + pod + ",main,1\n",
			`my.csv:1: missing column "compute_ratio" (header: timestamp,namespace,pod,container,memory_bytes)`},
		{"non-numeric", longHeader + row("60", "1", "0") + row("120", "abc", "0"), `my.csv:3: memory_bytes "abc" is not a number`},
		// A truncated last row, and an unquoted comma: how the row differs, not only
		// encoding/csv's 'wrong number of fields'.
		{"truncated row", longHeader + row("60", "1", "0") + "120,ns," + pod + ",ma", `my.csv:3: 4 fields, the header has 6 (a truncated row, or a comma inside an unquoted cell?)`},
		{"unquoted comma", longHeader + row("60", "1,5", "0"), `my.csv:2: 7 fields, the header has 6 (a truncated row, or a comma inside an unquoted cell?)`},
		{"negative", longHeader + row("60", "1", "-0.1"), `my.csv:2: compute_ratio "-0.1" is negative`},
		{"infinite", longHeader + row("60", "+Inf", "0"), `my.csv:2: memory_bytes "+Inf" is not a finite number`},
		{"bad timestamp", longHeader + row("yesterday", "1", "0"), `my.csv:2: timestamp "yesterday" is neither Unix seconds nor RFC 3339`},
		{"negative timestamp", longHeader + row("-5", "1", "0"), `my.csv:2: timestamp "-5" is out of range (Unix seconds 0..1e11)`},
		// Milliseconds, as Prometheus's API and pandas write them, are named as such.
		{"millisecond timestamp", longHeader + row("1796315293000", "1", "0"), `my.csv:2: timestamp "1796315293000" is out of range (Unix seconds 0..1e11); it reads as Unix milliseconds (2026-12-03T16:28:13Z): divide by 1000`},
		{"far timestamp", longHeader + row("1e15", "1", "0"), `my.csv:2: timestamp "1e15" is out of range (Unix seconds 0..1e11)`},
		{"conflicting values", longHeader + row("60", "1", "0") + row("60", "2", "0"), `my.csv:3: pod ns/` + pod + ` container main has two values at 1970-01-01T00:01:00Z: 1 (line 2) and 2`},
		{"no deployment name", longHeader + "60,ns,standalone,main,1,0\n",
			`my.csv:2: pod "standalone" does not follow the Deployment naming <deployment>-<pod-template-hash>-<suffix>; add a "workload" column`},
		{"two workloads", "timestamp,namespace,pod,container,memory_bytes,compute_ratio,workload\n60,ns,p,main,1,0,a\n120,ns,p,main,1,0,b\n",
			`my.csv:3: pod ns/p has workload "b" here and "a" before`},
		{"empty pod", longHeader + "60,ns,,main,1,0\n", `my.csv:2: empty namespace, pod or container`},
		{"quote error", longHeader + "60,ns,\"p,main,1,0\n", `my.csv:2: extraneous or missing " in quoted-field`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ReadLongCSV(strings.NewReader(c.in), "my.csv")
			wantInputError(t, err, c.wantErr)
		})
	}
}

func TestReadLongCSVCleaning(t *testing.T) {
	pod := "web-" + TemplateHash("x") + "-" + PodSuffix("x")
	in := "namespace,pod,compute_ratio,container,memory_bytes,timestamp,workload\n" + // any column order
		"ns," + pod + ",0.5,main,300,180,\n" +
		"ns," + pod + ",0.25,main,100,1970-01-01T00:01:00Z,\n" + // RFC 3339, unsorted
		"ns," + pod + ",0.25,main,100,60,\n" + // exact duplicate
		"ns," + pod + ",1.5,main,,120,\n" + // compute out of range, no memory
		"ns,solo,0,main,5,60,batch\n" // workload column, pod name without the convention
	tr, st, err := ReadLongCSV(strings.NewReader(in), "my.csv")
	if err != nil {
		t.Fatal(err)
	}
	wantMem := SignalStats{File: "my.csv", Values: 4, Kept: 3, Samples: 3, Duplicates: 1, Unsorted: 1}
	wantCPU := SignalStats{File: "my.csv", Values: 5, Kept: 3, Samples: 3, Duplicates: 1, OutOfRange: 1, Unsorted: 1,
		FirstOutOfRange: &InputError{File: "my.csv", Line: 5, Msg: "compute_ratio 1.5 is above 1: compute_ratio is a ratio 0–1, not percent"}}
	if !reflect.DeepEqual(st.Memory, wantMem) || !reflect.DeepEqual(st.Compute, wantCPU) || !st.Latency.Missing {
		t.Errorf("stats %+v\nwant memory %+v compute %+v, latency missing", st, wantMem, wantCPU)
	}
	if len(tr.Pods) != 2 {
		t.Fatalf("%d pods", len(tr.Pods))
	}
	p := tr.Pods[0]
	if p.Workload != "web" || p.ReplicaSet != "web-"+TemplateHash("x") {
		t.Errorf("owner %s/%s", p.Workload, p.ReplicaSet)
	}
	if !equalFloats(values(p.Memory), []float64{100, 300}) || !equalFloats(values(p.Compute), []float64{0.25, 0.5}) {
		t.Errorf("memory %v compute %v", p.Memory, p.Compute)
	}
	if !p.Memory[0].T.Equal(time.Unix(60, 0)) || !p.Memory[1].T.Equal(time.Unix(180, 0)) {
		t.Errorf("times %v", p.Memory)
	}
	solo := tr.Pods[1]
	if solo.Workload != "batch" || solo.ReplicaSet != "batch-"+TemplateHash("ns/batch") {
		t.Errorf("owner of solo %s/%s", solo.Workload, solo.ReplicaSet)
	}
}

func TestLongCSVRoundTrip(t *testing.T) {
	in := tinyTrace()
	out, st := longRoundTrip(t, in)
	if st.Memory.Skipped()+st.Compute.Skipped()+st.Latency.Skipped() != 0 {
		t.Errorf("skipped values: %v", st)
	}
	var omIn, omOut bytes.Buffer
	if err := WriteOpenMetrics(&omIn, in, OpenMetricsOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteOpenMetrics(&omOut, out, OpenMetricsOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(omIn.Bytes(), omOut.Bytes()) {
		t.Error("OpenMetrics output differs after a long CSV round trip")
	}
	for i := range in.Pods {
		in.Pods[i].ID = "" // not in the long format
	}
	if !reflect.DeepEqual(normalize(in), normalize(out)) {
		t.Errorf("round trip differs:\n in %+v\nout %+v", in, out)
	}
}

func TestLongCSVRoundTripGenTD26(t *testing.T) {
	dir := sharedData(t, "gentd26")
	in, _, err := ReadGenTD26(dir, GenTD26Options{End: testEnd, PodsPerDeployment: 3})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := longRoundTrip(t, in)
	for i := range in.Pods {
		in.Pods[i].ID = ""
	}
	if !reflect.DeepEqual(normalize(in), normalize(out)) {
		t.Error("GenTD26 round trip through the long CSV differs")
	}
}

// normalize makes traces comparable with DeepEqual: UTC times, nil empty series.
// longRoundTrip writes tr as a long CSV and reads it back.
func longRoundTrip(t *testing.T, tr Trace) (Trace, Stats) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteLongCSV(&buf, tr); err != nil {
		t.Fatal(err)
	}
	out, st, err := ReadLongCSV(&buf, "round.csv")
	if err != nil {
		t.Fatal(err)
	}
	return out, st
}

func normalize(t Trace) Trace {
	n := func(ps []Point) []Point {
		if len(ps) == 0 {
			return nil
		}
		out := make([]Point, len(ps))
		for i, p := range ps {
			out[i] = Point{T: p.T.UTC(), V: p.V}
		}
		return out
	}
	var out Trace
	for _, p := range t.Pods {
		p.Memory, p.Compute, p.LatencyP95 = n(p.Memory), n(p.Compute), n(p.LatencyP95)
		out.Pods = append(out.Pods, p)
	}
	return out
}

// TestReadLongCSVRefusesInvalidNames: a namespace, pod, container or workload cell the
// API server would refuse as a name (or a workload whose ReplicaSet name would be too
// long) is an error naming the file, the line and the column, as synth's and GenTD26's
// names are; before, the trace was read and its manifests did not apply.
func TestReadLongCSVRefusesInvalidNames(t *testing.T) {
	pod := "web-" + TemplateHash("x") + "-" + PodSuffix("x")
	const hdr = "timestamp,namespace,pod,container,memory_bytes,compute_ratio,workload\n"
	ok := "60,ns," + pod + ",main,1,0,\n"
	long := strings.Repeat("a", 250)
	for name, c := range map[string]struct{ row, want string }{
		"namespace":         {"120,Team_A," + pod + ",main,1,0,\n", `my.csv:3: namespace "Team_A": not a valid Kubernetes name`},
		"pod":               {"120,ns,My_Pod,main,1,0,batch\n", `my.csv:3: pod "My_Pod": not a valid Kubernetes name`},
		"pod from name":     {"120,ns,Web-" + TemplateHash("x") + "-" + PodSuffix("x") + ",main,1,0,\n", `my.csv:3: pod "Web-`},
		"container":         {"120,ns," + pod + ",my.server,1,0,\n", `my.csv:3: container "my.server": not a valid Kubernetes name`},
		"workload":          {"120,ns,solo,main,1,0,Bad_Name\n", `my.csv:3: workload "Bad_Name": not a valid Kubernetes name`},
		"long workload":     {"120,ns,solo,main,1,0," + long + "\n", `my.csv:3: ReplicaSet (workload-hash) "` + long + "-"},
		"workload from pod": {"120,ns,web--" + TemplateHash("x") + "-" + PodSuffix("x") + ",main,1,0,\n", `my.csv:3: workload "web-": not a valid Kubernetes name`},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := ReadLongCSV(strings.NewReader(hdr+ok+c.row), "my.csv")
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("error %v, want one starting %q", err, c.want)
			}
		})
	}
	if _, _, err := ReadLongCSV(strings.NewReader(hdr+ok+"120,ns,solo,main,1,0,llm.chat\n"), "my.csv"); err != nil {
		t.Errorf("valid names: %v", err)
	}
}
