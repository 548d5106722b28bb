package backend

import (
	"encoding/json"
	"os"
	"regexp"
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
		{"0", 0, "not a positive size"},
		{"-80Gi", 0, "not a positive size"},
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

// TestChartSchemaGPUMemory: the Helm chart's schema takes the gpuMemory values the
// binaries take (ParseGPUMemory) and refuses the forms they refuse (decimal units,
// milli, a number without a unit under 10 digits), so that helm install fails where
// the pods would crash-loop. Only a size under 1Gi with a binary unit (80Mi) or of 10
// digits (1,000,000,000–1,073,741,823 bytes) passes the schema's pattern and is
// refused at start. The chart's patterns (gpuMemory, the simulated
// nodes' gpuMemory) are read from values.schema.json.
func TestChartSchemaGPUMemory(t *testing.T) {
	raw, err := os.ReadFile("../charts/gpufrac/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if m, ok := c.(map[string]any); ok && k == "gpuMemory" {
					if p, ok := m["pattern"].(string); ok {
						patterns = append(patterns, p)
					}
				}
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	var schema any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	walk(schema)
	if len(patterns) < 2 {
		t.Fatalf("%d gpuMemory patterns in the schema, want the top-level one and the simulated nodes'", len(patterns))
	}
	for _, p := range patterns {
		re, err := regexp.Compile(p)
		if err != nil {
			t.Fatalf("pattern %q: %v", p, err)
		}
		for _, v := range []string{"80Gi", "80GiB", "141Gi", "81559Mi", "1.5Ti", "1Gi", "85899345920", "1073741824", "8.6e10",
			"80", "1073741823", "80m", "80Mi", "80G", "80GB", "-80Gi", "0", "80gi", "eighty", ""} {
			_, perr := ParseGPUMemory(v)
			switch schemaOK := re.MatchString(v); {
			case perr == nil && !schemaOK:
				t.Errorf("%q: the binaries take it, the chart's schema refuses it", v)
			case perr != nil && schemaOK && !(strings.Contains(perr.Error(), "under 1Gi") && (strings.ContainsAny(v, "KMGTPE") || len(v) == 10)):
				t.Errorf("%q: the chart's schema accepts it, the binaries refuse it: %v", v, perr)
			}
		}
	}
}
