package framework

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestProcStat: this process's stat fields count from field 3 (state, one letter), its
// start time (field 22) parses, and a PID that does not exist is an error.
func TestProcStat(t *testing.T) {
	f, err := ProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(f[0]) != 1 || !strings.Contains("RSDI", f[0]) {
		t.Errorf("state %q, want one of R, S, D, I", f[0])
	}
	if ppid, err := strconv.Atoi(f[1]); err != nil || ppid != os.Getppid() {
		t.Errorf("field 4 (ppid) %q, want %d", f[1], os.Getppid())
	}
	if st, err := procStartTime(os.Getpid()); err != nil || st == 0 {
		t.Errorf("start time %d, %v", st, err)
	}
	if _, err := ProcStat(-1); err == nil {
		t.Error("PID -1: no error")
	}
}

// TestFreePortsBelowTheEphemeralRange: the cluster's ports (and FreePorts') lie in the
// 12,000 ports below the kernel's ephemeral range, where no outgoing connection takes one
// before its process binds it (a port 0 port is ephemeral), and none is handed out twice.
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low <= 12000+1024 {
		t.Skipf("ephemeral range starts at %d: ports come from port 0", low)
	}
	seen := map[int]bool{}
	for range 3 {
		ports, err := freePorts(7)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if p >= low || p < low-12000 {
				t.Errorf("port %d outside [%d, %d): an ephemeral port may be taken by an outgoing connection before the bind", p, low-12000, low)
			}
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}
