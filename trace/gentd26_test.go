package trace

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	memHeader  = "timestamp_anon,value,container_ip\n"
	dutyHeader = "value,timestamp_anon,container_ip\n"
	latHeader  = "timestamp_anon,value,container_ip\n"
)

func TestReadGenTD26BadInput(t *testing.T) {
	okMem := memHeader + "60.0,100.0,p1\n120.0,200.0,p1\n"
	okDuty := dutyHeader + "0.0,60.0,p1\n50.0,120.0,p1\n"
	cases := []struct {
		name      string
		mem, duty string
		wantErr   string
	}{
		{"missing column", okMem, "value,timestamp_anon\n0,60\n", `pod_gpu_duty_cycle_anon.csv:1: missing column "container_ip" (header: value,timestamp_anon)`},
		{"non-numeric value", okMem, dutyHeader + "0.0,60.0,p1\nabc,120.0,p1\n", `pod_gpu_duty_cycle_anon.csv:3: value "abc" is not a number`},
		{"empty value", okMem, dutyHeader + ",60.0,p1\n", `pod_gpu_duty_cycle_anon.csv:2: value "" is not a number`},
		{"NaN value", memHeader + "60.0,NaN,p1\n", okDuty, `pod_gpu_memory_used_bytes_anon.csv:2: value "NaN" is not a finite number`},
		{"negative value", memHeader + "60.0,100.0,p1\n120.0,-5,p1\n", okDuty, `pod_gpu_memory_used_bytes_anon.csv:3: value "-5" is negative`},
		{"negative duty", okMem, dutyHeader + "-0.5,60.0,p1\n", `pod_gpu_duty_cycle_anon.csv:2: value "-0.5" is negative`},
		{"bad timestamp", memHeader + "yesterday,100.0,p1\n", okDuty, `pod_gpu_memory_used_bytes_anon.csv:2: timestamp_anon "yesterday" is not a number of Unix seconds`},
		{"empty container_ip", memHeader + "60.0,100.0,\n", okDuty, `pod_gpu_memory_used_bytes_anon.csv:2: empty container_ip`},
		{"wrong field count", memHeader + "60.0,100.0,p1\n120.0,100.0\n", okDuty, `pod_gpu_memory_used_bytes_anon.csv:3: 2 fields, the header has 3 (a truncated row, or a comma inside an unquoted cell?)`},
		{"conflicting duplicate", memHeader + "60.0,100.0,p1\n60.0,101.0,p1\n", okDuty, `pod_gpu_memory_used_bytes_anon.csv:3: pod p1 has two values at 1970-01-01T00:01:00Z: 100 (line 2) and 101`},
		{"empty file", "", okDuty, `pod_gpu_memory_used_bytes_anon.csv:1: empty file, want a header with columns timestamp_anon,value,container_ip`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{GenTD26MemoryFile: c.mem, GenTD26DutyCycleFile: c.duty})
			_, _, err := ReadGenTD26(dir, GenTD26Options{End: testEnd})
			wantInputError(t, err, c.wantErr)
		})
	}
}

func TestReadGenTD26Cleaning(t *testing.T) {
	cases := []struct {
		name      string
		mem, duty string
		// wanted per-signal stats and resulting series of pod p1
		memStats, dutyStats SignalStats
		wantMem, wantDuty   []float64
	}{
		{
			name:      "unsorted rows are sorted",
			mem:       memHeader + "180.0,3.0,p1\n60.0,1.0,p1\n120.0,2.0,p1\n",
			duty:      dutyHeader + "20.0,120.0,p1\n10.0,60.0,p1\n",
			memStats:  SignalStats{Values: 3, Kept: 3, Samples: 3, Unsorted: 1},
			dutyStats: SignalStats{Values: 2, Kept: 2, Samples: 2, Unsorted: 1},
			wantMem:   []float64{1, 2, 3}, wantDuty: []float64{0.1, 0.2},
		},
		{
			name:      "exact duplicates are dropped",
			mem:       memHeader + "60.0,1.0,p1\n60.0,1.0,p1\n120.0,2.0,p1\n60.0,1.0,p1\n",
			duty:      dutyHeader + "10.0,60.0,p1\n10.0,60.0,p1\n",
			memStats:  SignalStats{Values: 4, Kept: 2, Samples: 2, Duplicates: 2, Unsorted: 1},
			dutyStats: SignalStats{Values: 2, Kept: 1, Samples: 1, Duplicates: 1},
			wantMem:   []float64{1, 2}, wantDuty: []float64{0.1},
		},
		{
			name: "out of range values are skipped",
			mem:  memHeader + "60.0,9223372036854775794,p1\n120.0,2.0,p1\n",
			duty: dutyHeader + "100.0,60.0,p1\n100.5,120.0,p1\n",
			memStats: SignalStats{Values: 2, Kept: 1, Samples: 1, OutOfRange: 1, FirstOutOfRange: &InputError{File: GenTD26MemoryFile, Line: 2,
				Msg: "value 9.223372036854776e+18 is above 2^47 bytes (128 TiB): a DCGM blank sentinel or corrupt"}},
			dutyStats: SignalStats{Values: 2, Kept: 1, Samples: 1, OutOfRange: 1, FirstOutOfRange: &InputError{File: GenTD26DutyCycleFile, Line: 3,
				Msg: "value 100.5 is above 100: the duty cycle is a percent 0–100"}},
			wantMem: []float64{2}, wantDuty: []float64{1},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{GenTD26MemoryFile: c.mem, GenTD26DutyCycleFile: c.duty})
			tr, st, err := ReadGenTD26(dir, GenTD26Options{End: testEnd})
			if err != nil {
				t.Fatal(err)
			}
			c.memStats.File, c.dutyStats.File = GenTD26MemoryFile, GenTD26DutyCycleFile
			if !reflect.DeepEqual(st.Memory, c.memStats) || !reflect.DeepEqual(st.Compute, c.dutyStats) {
				t.Errorf("stats\n memory %+v\n compute %+v\nwant\n memory %+v\n compute %+v", st.Memory, st.Compute, c.memStats, c.dutyStats)
			}
			if !st.Latency.Missing {
				t.Error("latency file absent but not reported Missing")
			}
			if len(tr.Pods) != 1 {
				t.Fatalf("%d pods, want 1", len(tr.Pods))
			}
			if got := values(tr.Pods[0].Memory); !equalFloats(got, c.wantMem) {
				t.Errorf("memory %v, want %v", got, c.wantMem)
			}
			if got := values(tr.Pods[0].Compute); !equalFloats(got, c.wantDuty) {
				t.Errorf("compute %v, want %v", got, c.wantDuty)
			}
			if err := tr.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestReadGenTD26Options(t *testing.T) {
	var mem, duty strings.Builder
	mem.WriteString(memHeader)
	duty.WriteString(dutyHeader)
	// Five pods, one sample a minute for 10 minutes from t=600 s; pod e only for
	// the first 3 minutes.
	for _, ip := range []string{"e", "b", "d", "a", "c"} {
		for i := range 10 {
			if ip == "e" && i >= 3 {
				break
			}
			ts := strconv.Itoa(600+60*i) + ".0"
			mem.WriteString(ts + "," + strconv.Itoa(1000+i) + ".0," + ip + "\n")
			duty.WriteString(strconv.Itoa(i) + ".0," + ts + "," + ip + "\n")
		}
	}
	// Requests of pod a: minute [600,660): 10 requests 1..10 s; minute [660,720): 1.
	lat := latHeader
	for i := 1; i <= 10; i++ {
		lat += strconv.Itoa(600+5*i) + ".0," + strconv.Itoa(i*1000) + ".0,a\n"
	}
	lat += "700.0,500.0,a\n" + "700.0,500.0,zz\n"
	dir := writeFiles(t, map[string]string{GenTD26MemoryFile: mem.String(), GenTD26DutyCycleFile: duty.String(), GenTD26LatencyFile: lat})

	tr, st, err := ReadGenTD26(dir, GenTD26Options{MaxPods: 3, PodsPerDeployment: 2, Duration: 5 * time.Minute, End: testEnd})
	if err != nil {
		t.Fatal(err)
	}
	// Window (1140-300, 1140] keeps the last 5 samples of a..d; e has none left,
	// so the 3 pods are a, b, c.
	var ids []string
	for _, p := range tr.Pods {
		ids = append(ids, p.ID)
		if len(p.Memory) != 5 || !p.Memory[4].T.Equal(testEnd) || !p.Memory[0].T.Equal(testEnd.Add(-4*time.Minute)) {
			t.Errorf("pod %s memory %v, want 5 samples ending at %v", p.ID, p.Memory, testEnd)
		}
	}
	if strings.Join(ids, ",") != "a,b,c" {
		t.Errorf("pods %v, want a,b,c", ids)
	}
	if tr.Pods[0].Workload != "sd-000" || tr.Pods[1].Workload != "sd-000" || tr.Pods[2].Workload != "sd-001" {
		t.Errorf("workloads %s %s %s, want sd-000 sd-000 sd-001", tr.Pods[0].Workload, tr.Pods[1].Workload, tr.Pods[2].Workload)
	}
	if tr.Pods[0].ReplicaSet != tr.Pods[1].ReplicaSet || tr.Pods[0].Pod == tr.Pods[1].Pod {
		t.Errorf("pods of one Deployment must share the ReplicaSet and differ in name: %+v %+v", tr.Pods[0], tr.Pods[1])
	}
	for _, p := range tr.Pods {
		d, rs, ok := SplitDeploymentPodName(p.Pod)
		if !ok || d != p.Workload || rs != p.ReplicaSet || len(rs) != len(d)+11 {
			t.Errorf("pod name %q does not split into %s/%s", p.Pod, p.Workload, p.ReplicaSet)
		}
		if p.Namespace != "gentd26" || p.Container != "inference" {
			t.Errorf("namespace/container %s/%s", p.Namespace, p.Container)
		}
	}
	// 5 pods: a..d 10 samples, e 3; kept 3 pods x 5.
	wantMem := SignalStats{File: GenTD26MemoryFile, Values: 43, Kept: 15, Samples: 15, Trimmed: 28}
	if st.Memory != wantMem {
		t.Errorf("memory stats %+v, want %+v", st.Memory, wantMem)
	}
	// Latency: all requests (605..700 s) are before the window (840, 1140], so
	// trimmed, including those of zz that has no memory.
	if st.Latency.Values != 12 || st.Latency.Trimmed != 12 || st.Latency.Samples != 0 {
		t.Errorf("latency stats %+v", st.Latency)
	}

	// Whole trace: p95 per minute and orphans.
	tr, st, err = ReadGenTD26(dir, GenTD26Options{End: testEnd})
	if err != nil {
		t.Fatal(err)
	}
	a := tr.Pods[0]
	if a.ID != "a" || len(tr.Pods) != 5 {
		t.Fatalf("first pod %s of %d", a.ID, len(tr.Pods))
	}
	// The trace ends at 1140 s → testEnd; minute [600,660) ends at 660 s.
	shift := testEnd.Sub(time.Unix(1140, 0))
	want := []Point{{time.Unix(660, 0).Add(shift).UTC(), 10}, {time.Unix(720, 0).Add(shift).UTC(), 0.5}}
	if len(a.LatencyP95) != 2 || !a.LatencyP95[0].T.Equal(want[0].T) || a.LatencyP95[0].V != want[0].V || !a.LatencyP95[1].T.Equal(want[1].T) || a.LatencyP95[1].V != want[1].V {
		t.Errorf("latency %v, want %v", a.LatencyP95, want)
	}
	if st.Latency.Orphans != 1 || st.Latency.Kept != 11 || st.Latency.Samples != 2 {
		t.Errorf("latency stats %+v, want 1 orphan, 11 kept, 2 samples", st.Latency)
	}
}

// TestReadGenTD26Real checks the reader against an independent reading of the
// published files.
func TestReadGenTD26Real(t *testing.T) {
	dir := sharedData(t, "gentd26")
	tr, st, err := ReadGenTD26(dir, GenTD26Options{End: testEnd})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	memRows := readRows(t, filepath.Join(dir, GenTD26MemoryFile))
	dutyRows := readRows(t, filepath.Join(dir, GenTD26DutyCycleFile))
	ips := map[string]bool{}
	for _, r := range memRows {
		ips[r.ip] = true
	}
	if len(tr.Pods) != len(ips) {
		t.Errorf("%d pods, want %d distinct container_ip in the memory file", len(tr.Pods), len(ips))
	}
	byID := map[string]*Pod{}
	for i := range tr.Pods {
		byID[tr.Pods[i].ID] = &tr.Pods[i]
	}
	if !sort.SliceIsSorted(tr.Pods, func(i, j int) bool { return tr.Pods[i].ID < tr.Pods[j].ID }) {
		t.Error("pods not in container_ip order")
	}
	// The last sample of the trace is at End.
	if s := tr.Summarize(); !s.End.Equal(testEnd) {
		t.Errorf("trace ends at %v, want %v", s.End, testEnd)
	}
	var lastTS float64
	for _, r := range append(memRows, dutyRows...) {
		lastTS = math.Max(lastTS, r.ts)
	}
	check := func(name string, rows []row, get func(*Pod) []Point, div float64, st SignalStats) {
		if st.Values != len(rows) || st.Kept+st.Skipped() != len(rows) {
			t.Errorf("%s: stats %+v for %d rows", name, st, len(rows))
		}
		n := 0
		for i := range tr.Pods {
			n += len(get(&tr.Pods[i]))
		}
		if n != st.Samples || n != st.Kept {
			t.Errorf("%s: %d samples in trace, stats %+v", name, n, st)
		}
		// Every row with an in-range value is in the trace, at its time, with
		// its value (bytes exactly, duty cycle / 100).
		found := 0
		for _, r := range rows {
			p := byID[r.ip]
			if p == nil {
				t.Fatalf("%s: container_ip %s missing", name, r.ip)
			}
			ts := testEnd.Add(time.Duration((r.ts - lastTS) * float64(time.Second)))
			ps := get(p)
			i := sort.Search(len(ps), func(i int) bool { return !ps[i].T.Before(ts) })
			if i < len(ps) && ps[i].T.Equal(ts) && ps[i].V == r.v/div {
				found++
			}
		}
		if found != st.Kept || found+st.OutOfRange != len(rows) {
			t.Errorf("%s: %d of %d rows found in the trace, stats %+v", name, found, len(rows), st)
		}
	}
	check("memory", memRows, func(p *Pod) []Point { return p.Memory }, 1, st.Memory)
	check("duty", dutyRows, func(p *Pod) []Point { return p.Compute }, 100, st.Compute)

	// Published facts (measured on the full trace; this subset is close).
	f, m := dutyCycleStats(t, tr)
	if f < 0.6 || f > 0.75 {
		t.Errorf("zero duty-cycle share %.3f, published 0.67", f)
	}
	if m < 0.04 || m > 0.1 {
		t.Errorf("mean compute %.3f, published 0.07", m)
	}
	if st.Latency.Missing || st.Latency.Samples == 0 || st.Latency.Orphans != 0 {
		t.Errorf("latency stats %+v", st.Latency)
	}
	t.Logf("%s; %s", tr.Summarize(), st)
}

type row struct {
	ts, v float64
	ip    string
}

// readRows reads a GenTD26 file independently of the package's reader.
func readRows(t *testing.T, path string) []row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	var out []row
	for _, r := range recs[1:] {
		ts, err1 := strconv.ParseFloat(r[col["timestamp_anon"]], 64)
		v, err2 := strconv.ParseFloat(r[col["value"]], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v", path, r)
		}
		out = append(out, row{ts, v, r[col["container_ip"]]})
	}
	return out
}

func values(ps []Point) []float64 {
	var out []float64
	for _, p := range ps {
		out = append(out, p.V)
	}
	return out
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadGenTD26RefusesInvalidNames: a namespace, container or Deployment prefix the
// API server would refuse as a name is an error naming the flag, before any file is
// read (the manifests of `gpufrac trace import --manifests` would not apply).
func TestReadGenTD26RefusesInvalidNames(t *testing.T) {
	for _, o := range []GenTD26Options{{Namespace: "Team_A"}, {Container: "my.server"}, {DeploymentPrefix: "Bad_Name"}} {
		_, _, err := ReadGenTD26(t.TempDir(), o)
		if err == nil || !strings.Contains(err.Error(), "not a valid Kubernetes name") {
			t.Errorf("%+v: %v, want an error naming the invalid name", o, err)
		}
	}
}
