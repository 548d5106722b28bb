package backend

import (
	"strings"
	"testing"
)

// TestParseGPUMemoryUnits: --gpu-memory takes binary quantities and plain bytes; a decimal
// suffix ("80G" = 80×10⁹ bytes = 74.5 GiB, 4 GiB short of an "80 GB" GPU) and a number
// without a unit (80 bytes) are refused with a message naming the value and what to
// write instead, never taken silently.
func TestParseGPUMemoryUnits(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64  // bytes; 0: an error
		msg  string // in the error
	}{
		{"80Gi", 80 << 30, ""},
		{"80GiB", 80 << 30, ""},
		{" 141Gi ", 141 << 30, ""},
		{"81559Mi", 81559 << 20, ""},
		{"81559MiB", 81559 << 20, ""},
		{"0.5Ti", 512 << 30, ""},
		{"85899345920", 80 << 30, ""},
		{"80e9", 80e9, ""},
		{"80G", 0, "write 80Gi"},
		{"80GB", 0, "write 80Gi"},
		{"141GB", 0, "write 141Gi"},
		{"81559MB", 0, "write 81559Mi"},
		{"83886080kB", 0, "write 83886080Ki"},
		{"1TB", 0, "write 1Ti"},
		{" 80GB ", 0, "write 80Gi"},
		{"80B", 0, "such as 80Gi"},
		{"B", 0, "such as 80Gi"},
		{"141G", 0, "write 141Gi"},
		{"81559M", 0, "write 81559Mi"},
		{"83886080k", 0, "write 83886080Ki"},
		{"1T", 0, "write 1Ti"},
		{"80", 0, "under 1Gi"},
		{"80Mi", 0, "under 1Gi"},
		{"0", 0, "under 1Gi"},
		{"-80Gi", 0, "under 1Gi"},
		{"80gi", 0, "such as 80Gi"},
		{"eighty", 0, "such as 80Gi"},
		{"", 0, "such as 80Gi"},
	} {
		got, err := ParseGPUMemory(c.in)
		switch {
		case c.want != 0 && (err != nil || got != c.want):
			t.Errorf("%q: %d, %v; want %d", c.in, got, err, c.want)
		case c.want == 0 && err == nil:
			t.Errorf("%q: %d bytes, want an error", c.in, got)
		case c.want == 0 && !strings.Contains(err.Error(), c.msg):
			t.Errorf("%q: error %q, want it to say %q", c.in, err, c.msg)
		case c.want == 0 && !strings.Contains(err.Error(), "\""+c.in+"\""):
			t.Errorf("%q: error %q does not name the value", c.in, err)
		case c.want == 0 && strings.Contains(err.Error(), "regular expression"):
			t.Errorf("%q: error %q dumps the quantity parser's regular expression", c.in, err)
		}
	}
}
