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
