package agent

import (
	"os"
	"path/filepath"
	"testing"
)

const (
	fixtureUID = "1234abcd-5678-90ef-1234-567890abcdef"
	fixtureCID = "3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170f6e5d4c"
)

// TestParseCgroupFixtures parses /proc/<pid>/cgroup files of every layout in
// testdata/cgroup: cgroup v1 and v2; containerd, CRI-O and Docker; the cgroupfs
// (pod UID with dashes) and systemd (pod UID with underscores) drivers; and host
// processes. Every fixture must be listed here.
func TestParseCgroupFixtures(t *testing.T) {
	both := CgroupInfo{PodUID: fixtureUID, ContainerID: fixtureCID}
	tests := map[string]struct {
		want CgroupInfo
		ok   bool
	}{
		"v1-cgroupfs-containerd":     {both, true},
		"v1-cgroupfs-docker":         {both, true},
		"v1-cgroupfs-crio":           {both, true},
		"v1-systemd-docker":          {both, true},
		"v1-systemd-containerd":      {both, true},
		"v2-systemd-containerd":      {both, true},
		"v2-systemd-crio":            {both, true},
		"v2-systemd-docker":          {both, true},
		"v2-cgroupfs-containerd":     {both, true},
		"v2-cgroupfs-crio":           {both, true},
		"v2-cgroupfs-docker":         {both, true},
		"v2-containerd-systemd-path": {both, true},
		"v2-cgroupns-relative":       {both, true},
		"v2-kind-nested":             {both, true},
		"v2-nested-in-container":     {both, true},
		"v2-crio-conmon":             {both, true},
		"v2-static-pod":              {CgroupInfo{PodUID: "0123456789abcdef0123456789abcdef", ContainerID: fixtureCID}, true},
		"v2-pod-only":                {CgroupInfo{PodUID: fixtureUID}, true},
		"v1-docker-standalone":       {CgroupInfo{ContainerID: fixtureCID}, true},
		"v2-docker-standalone":       {CgroupInfo{ContainerID: fixtureCID}, true},
		"v2-host-service":            {CgroupInfo{}, false},
		"v2-host-user":               {CgroupInfo{}, false},
		"v1-host":                    {CgroupInfo{}, false},
		"v2-root":                    {CgroupInfo{}, false},
	}
	files, err := os.ReadDir(filepath.Join("testdata", "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(tests) {
		t.Errorf("%d fixtures, %d test cases: list every fixture", len(files), len(tests))
	}
	for _, f := range files {
		t.Run(f.Name(), func(t *testing.T) {
			tc, listed := tests[f.Name()]
			if !listed {
				t.Fatalf("fixture %s has no test case", f.Name())
			}
			data, err := os.ReadFile(filepath.Join("testdata", "cgroup", f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			got, ok := ParseCgroup(data)
			if got != tc.want || ok != tc.ok {
				t.Errorf("ParseCgroup = %+v, %v; want %+v, %v\n%s", got, ok, tc.want, tc.ok, data)
			}
		})
	}
}

func TestParseCgroupPathEdgeCases(t *testing.T) {
	tests := []struct {
		path string
		want CgroupInfo
		ok   bool
	}{
		// Upper-case hex is normalised.
		{"/kubepods/pod1234ABCD-5678-90EF-1234-567890ABCDEF/3F1C2A9B8E7D6C5B4A39281706F5E4D3C2B1A09F8E7D6C5B4A3928170F6E5D4C",
			CgroupInfo{PodUID: fixtureUID, ContainerID: fixtureCID}, true},
		// A "pod" segment that is not a UID is not a pod.
		{"/kubepods/podruntime/x", CgroupInfo{}, false},
		// A short container ID is not one.
		{"/kubepods/pod" + fixtureUID + "/abc123", CgroupInfo{PodUID: fixtureUID}, true},
		// UID with the wrong dash positions.
		{"/kubepods/pod1234abcd5-678-90ef-1234-567890abcdef/" + fixtureCID, CgroupInfo{ContainerID: fixtureCID}, true},
		{"", CgroupInfo{}, false},
		{"/", CgroupInfo{}, false},
	}
	for _, tc := range tests {
		got, ok := ParseCgroupPath(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseCgroupPath(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// TestParseCgroupPrefersComplete takes the line that names pod and container over an
// earlier line that names only one.
func TestParseCgroupPrefersComplete(t *testing.T) {
	data := "3:cpu:/kubepods/pod" + fixtureUID + "\n2:memory:/kubepods/pod" + fixtureUID + "/" + fixtureCID + "\n"
	got, ok := ParseCgroup([]byte(data))
	if !ok || got != (CgroupInfo{PodUID: fixtureUID, ContainerID: fixtureCID}) {
		t.Errorf("got %+v, %v", got, ok)
	}
	// Malformed lines are skipped.
	if _, ok := ParseCgroup([]byte("garbage\nno-colon-here\n")); ok {
		t.Error("malformed input parsed")
	}
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods/pod" + fixtureUID + "/" + fixtureCID))
	f.Add([]byte("1:name=systemd:/kubepods.slice/kubepods-pod1234abcd_5678_90ef_1234_567890abcdef.slice/crio-" + fixtureCID + ".scope"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, ok := ParseCgroup(data)
		if !ok && info != (CgroupInfo{}) {
			t.Errorf("not ok but %+v", info)
		}
		if info.PodUID != "" && !isPodUID(info.PodUID) {
			t.Errorf("bad pod UID %q", info.PodUID)
		}
		if info.ContainerID != "" && (len(info.ContainerID) != 64 || !isHex(info.ContainerID)) {
			t.Errorf("bad container ID %q", info.ContainerID)
		}
	})
}
