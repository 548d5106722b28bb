package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func (c *Cluster) prometheusData() string { return filepath.Join(c.Dir, "prometheus", "data") }
func (c *Cluster) prometheusConfig() string {
	return filepath.Join(c.Dir, "prometheus", "prometheus.yml")
}

// writePrometheusConfig renders prometheus.yml from the scrape targets and rule files.
func (c *Cluster) writePrometheusConfig() error {
	c.mu.Lock()
	targets := append([]string(nil), c.st.ScrapeTargets...)
	rules := append([]string(nil), c.st.RuleFiles...)
	queryLog := c.st.QueryLog
	c.mu.Unlock()
	var b strings.Builder
	b.WriteString("# Written by github.com/gpufrac/gpufrac/e2e/framework.\nglobal:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
	if queryLog {
		fmt.Fprintf(&b, "  query_log_file: %s\n", strconv.Quote(c.LogPath("prometheus-queries")))
	}
	if len(rules) > 0 {
		b.WriteString("rule_files:\n")
		for _, r := range rules {
			fmt.Fprintf(&b, "- %s\n", strconv.Quote(r))
		}
	}
	if len(targets) > 0 {
		b.WriteString("scrape_configs:\n- job_name: e2e\n  honor_labels: true\n  static_configs:\n  - targets:\n")
		for _, t := range targets {
			fmt.Fprintf(&b, "    - %s\n", strconv.Quote(t))
		}
	}
	if err := os.MkdirAll(filepath.Dir(c.prometheusConfig()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(c.prometheusConfig(), []byte(b.String()), 0o644)
}

// runPromtool writes the samples of an OpenMetrics file as TSDB blocks into dataDir.
func runPromtool(ctx context.Context, promtool, file, dataDir string) error {
	file, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", file, dataDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("promtool backfill of %s into %s: %v\n%s", file, dataDir, err, out)
	}
	return nil
}

func (c *Cluster) startPrometheusProcess(bin string) (*process, error) {
	return c.start(Prometheus, bin, nil,
		"--config.file="+c.prometheusConfig(),
		"--storage.tsdb.path="+c.prometheusData(),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", c.st.Ports.Prometheus),
		"--web.enable-lifecycle",
		"--web.enable-admin-api",
		"--storage.tsdb.retention.time=30d",
	)
}

// StopPrometheus stops Prometheus (SIGTERM, then SIGKILL after the grace period), for
// tests that simulate a Prometheus outage. Its data stays; StartPrometheus resumes.
func (c *Cluster) StopPrometheus() error {
	p := c.findProcess(Prometheus)
	if p == nil {
		return nil
	}
	return p.stop(c.st.StopGrace)
}

// StartPrometheus starts Prometheus again on the same port with the same data
// directory and configuration, and waits until it is ready. It errors if Prometheus
// is already running or does not get ready (the error quotes its log).
func (c *Cluster) StartPrometheus(ctx context.Context) error {
	if p := c.findProcess(Prometheus); p != nil && p.alive() {
		return fmt.Errorf("prometheus already running (pid %d)", p.PID)
	}
	bins, err := findBinaries(c.st.BinDir)
	if err != nil {
		return err
	}
	p, err := c.startPrometheusProcess(bins[Prometheus])
	if err != nil {
		return err
	}
	return waitReady(ctx, p, c.readyTimeout(), httpCheck(plainHTTP, c.PrometheusURL+"/-/ready", ""))
}

// BackfillPrometheus writes OpenMetrics files into Prometheus' TSDB with promtool.
// Prometheus only picks up new blocks at startup, so a running Prometheus is stopped
// first and started again afterwards.
func (c *Cluster) BackfillPrometheus(ctx context.Context, files ...string) error {
	p := c.findProcess(Prometheus)
	running := p != nil && p.alive()
	if running {
		if err := c.StopPrometheus(); err != nil {
			return err
		}
	}
	bins, err := findBinaries(c.st.BinDir)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := runPromtool(ctx, bins[promtoolBin], f, c.prometheusData()); err != nil {
			return err
		}
	}
	if running {
		return c.StartPrometheus(ctx)
	}
	return nil
}

// AddScrapeTarget adds host:port targets to the "e2e" scrape job (1s interval,
// honor_labels), rewrites prometheus.yml and reloads a running Prometheus. Targets
// already present are ignored.
func (c *Cluster) AddScrapeTarget(ctx context.Context, targets ...string) error {
	c.mu.Lock()
	for _, t := range targets {
		if !slices.Contains(c.st.ScrapeTargets, t) {
			c.st.ScrapeTargets = append(c.st.ScrapeTargets, t)
		}
	}
	c.mu.Unlock()
	if err := c.writePrometheusConfig(); err != nil {
		return err
	}
	if err := c.save(); err != nil {
		return err
	}
	if p := c.findProcess(Prometheus); p != nil && p.alive() {
		return c.ReloadPrometheus(ctx)
	}
	return nil
}

// ReloadPrometheus makes a running Prometheus re-read prometheus.yml and its rule
// files (POST /-/reload). It errors if Prometheus rejects the configuration.
func (c *Cluster) ReloadPrometheus(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.PrometheusURL+"/-/reload", nil)
	if err != nil {
		return err
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("reload prometheus: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return fmt.Errorf("reload prometheus: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (c *Cluster) readyTimeout() time.Duration {
	if c.st.ReadyTimeout > 0 {
		return c.st.ReadyTimeout
	}
	return 2 * time.Minute
}
