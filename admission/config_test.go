package admission

import (
	"flag"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

func TestFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--min-confidence=0", "--memory-overhead=hami=256Mi, mps=1Gi", "--gpu-memory=141Gi", "--kai-mode=gpu-fraction",
		"--hami-memory-resource=example.com/vmem", "--mps-replica-memory=10Gi", "--kai-reserved-memory=512Mi"}); err != nil {
		t.Fatal(err)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.minConfidence() != 0 || c.MemoryOverhead[gpufracv1.BackendHAMi] != 256*backend.MiB || c.MemoryOverhead[gpufracv1.BackendMPS] != 1<<30 ||
		c.GPUMemoryBytes != 141<<30 || c.KAI.Mode != backend.KAIModeFraction || c.HAMi.MemoryResource != "example.com/vmem" ||
		c.HAMi.CoresResource != "nvidia.com/gpucores" || c.MPS.ReplicaMemoryBytes != 10<<30 ||
		c.KAI.ReservedMemoryBytes != 512*backend.MiB || c.UsableGPUMemoryBytes() != 141<<30-512*backend.MiB {
		t.Errorf("parsed %+v", c)
	}
	if (Config{}).WithDefaults().minConfidence() != 50 {
		t.Error("default confidence not 50")
	}
	for _, bad := range [][]string{{"--memory-overhead=gpu=1Gi"}, {"--memory-overhead=hami=-1Mi"}, {"--memory-overhead=hami"}, {"--gpu-memory=0"}, {"--gpu-memory=80"}, {"--min-confidence=x"}, {"--kai-reserved-memory=-1Mi"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(nopWriter{})
		var c Config
		c.AddFlags(fs)
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	bad := Config{MinConfidence: ptr.To[int32](101), OwnerWait: -time.Second, Config: backend.Config{KAI: backend.KAIConfig{Mode: "x"}, NVFractions: backend.NVFractionsConfig{Limit: "y"}}}.WithDefaults()
	err := bad.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	// Every joined error names its flag the same way, leading "--" included.
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, "--") {
			t.Errorf("error line %q does not start with its flag", line)
		}
	}
	if (Config{}).WithDefaults().KAI.ReservedMemoryBytes != 0 {
		t.Error("default KAI reserve not 0")
	}
	if err := (Config{Config: backend.Config{GPUMemoryBytes: 16 << 30, KAI: backend.KAIConfig{ReservedMemoryBytes: 16 << 30}}}).WithDefaults().Validate(); err == nil {
		t.Error("a reserve of the whole GPU accepted")
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

func TestCertNames(t *testing.T) {
	dns, ips := certNames(Options{Namespace: "g", Registration: Registration{Service: &ServiceReference{Namespace: "g", Name: "wh"}, URL: "https://127.0.0.1:9443"},
		CertDNSNames: []string{"x.example.com"}, CertIPs: []net.IP{net.ParseIP("10.0.0.1")}})
	if len(dns) != 3 || dns[0] != "wh.g.svc" || dns[1] != "wh.g.svc.cluster.local" || dns[2] != "x.example.com" {
		t.Errorf("dns %v", dns)
	}
	if len(ips) != 2 || !ips[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("ips %v", ips)
	}
	if dns, _ := certNames(Options{Namespace: "g"}); len(dns) != 1 || dns[0] != "gpufrac-admission.g.svc" {
		t.Errorf("default %v", dns)
	}
}
