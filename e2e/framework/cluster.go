// Package framework starts a real local Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler), KWOK fake GPU nodes and Prometheus, all on
// free loopback ports, for gpufrac's e2e tests and demo.
//
// A test calls Start and registers Stop with t.Cleanup. `go run ./e2e/cluster up` starts
// a detached cluster that outlives the command; Load re-opens it from its directory.
package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Component names, used for log files (<Dir>/logs/<name>.log), PIDs and errors.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	KWOK              = "kwok"
	Prometheus        = "prometheus"
)

const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1" // first IP of serviceCIDR: the kubernetes.default Service
	podCIDR     = "10.244.0.0/16"
	stateFile   = "state.json"
)

// Options configures Start. The zero value (plus Dir) is a usable configuration.
type Options struct {
	// Dir is the working directory for certificates, data, logs, the kubeconfig and the
	// state file; it is created if missing and must be empty or hold a stopped
	// cluster, whose data (etcd, prometheus, pki, logs) is removed: Start always creates
	// a fresh cluster. Required.
	Dir string
	// BinDir holds kube-apiserver, kube-controller-manager, kube-scheduler and kwok
	// (etcd, prometheus and promtool are looked up there first, then in PATH).
	// Default: <repo root>/bin, the repo root found by walking up from the working
	// directory to the go.mod of github.com/gpufrac/gpufrac.
	BinDir string
	// GPUNodes is the number of KWOK fake GPU nodes to create. 0 means 2; a negative
	// value creates none.
	GPUNodes int
	// GPUsPerNode is the nvidia.com/gpu capacity of each node. Default 8.
	GPUsPerNode int
	// Backfill lists OpenMetrics text files (ending with "# EOF", timestamps in seconds)
	// written into Prometheus' TSDB with promtool before Prometheus starts.
	Backfill []string
	// ScrapeTargets are host:port targets Prometheus scrapes every 1s under job "e2e"
	// with honor_labels: true. More can be added later with AddScrapeTarget.
	ScrapeTargets []string
	// RuleFiles are Prometheus rule files (recording/alerting rules) to load.
	RuleFiles []string
	// QueryLog makes Prometheus log every query with its timings to
	// <Dir>/logs/prometheus-queries.log (JSON lines), to find slow queries.
	QueryLog bool
	// WriteTSDB, if set, is called with Prometheus' data directory after Backfill and
	// before Prometheus starts, to write TSDB blocks there directly (a backfill too large
	// for OpenMetrics text and promtool); its error stops Start.
	WriteTSDB func(ctx context.Context, dataDir string) error
	// DisabledControllers names kube-controller-manager controllers to turn off besides
	// node IPAM and node lifecycle (e.g. "deployment-controller",
	// "replicaset-controller": a bench that creates a Deployment's ReplicaSet and pods
	// itself, with the names its backfilled series carry).
	DisabledControllers []string
	// ClientQPS, if positive, is the API client rate (queries per second, burst twice
	// that) of kube-controller-manager and kube-scheduler, for clusters of thousands of
	// pods; 0 keeps their defaults (20 and 50 QPS).
	ClientQPS int
	// Detach starts every process in its own session so it outlives this process
	// (for `go run ./e2e/cluster up` and the demo). Otherwise processes get SIGKILL
	// when this process dies.
	Detach bool
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL. Default 10s.
	StopGrace time.Duration
	// ReadyTimeout bounds the wait for each component to become ready. Default 2m.
	ReadyTimeout time.Duration
	// Logf, if set, receives progress lines (component started/ready, with timings).
	Logf func(format string, args ...any)
}

// ports are the loopback ports the cluster listens on.
type ports struct {
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	APIServer         int `json:"apiServer"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
	KWOK              int `json:"kwok"`
	Prometheus        int `json:"prometheus"`
}

// state is persisted to <Dir>/state.json so Load can re-open a detached cluster.
type state struct {
	Dir           string        `json:"dir"`
	BinDir        string        `json:"binDir"`
	Detach        bool          `json:"detach"`
	Ports         ports         `json:"ports"`
	Kubeconfig    string        `json:"kubeconfig"`
	GPUsPerNode   int           `json:"gpusPerNode"`
	Nodes         []string      `json:"nodes"`
	ScrapeTargets []string      `json:"scrapeTargets"`
	RuleFiles     []string      `json:"ruleFiles"`
	QueryLog      bool          `json:"queryLog,omitempty"`
	StopGrace     time.Duration `json:"stopGrace"`
	ReadyTimeout  time.Duration `json:"readyTimeout"`
	Processes     []*process    `json:"processes"`
}

// Cluster is a running (or stopped) local cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	// Dir is the cluster's working directory (absolute).
	Dir string
	// Kubeconfig is the path of an admin (system:masters) kubeconfig.
	Kubeconfig string
	// APIServerURL is https://127.0.0.1:PORT.
	APIServerURL string
	// PrometheusURL is http://127.0.0.1:PORT, without a trailing slash.
	PrometheusURL string
	// RESTConfig is the admin REST config.
	RESTConfig *rest.Config
	// Scheme holds the client-go types; callers may add their own before using Client.
	Scheme *runtime.Scheme
	// Client is a controller-runtime client using RESTConfig and Scheme.
	Client client.Client

	mu   sync.Mutex
	st   state
	logf func(string, ...any)
}

// Start starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK
// with o.GPUNodes Ready fake GPU nodes, and Prometheus (after backfilling o.Backfill),
// and waits until all are ready. On error everything already started is stopped, and
// the error names the failing component and quotes the tail of its log.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	begin := time.Now()
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	if err := prepareDir(o.Dir); err != nil {
		return nil, err
	}
	bins, err := findBinaries(o.BinDir)
	if err != nil {
		return nil, err
	}
	c, err := newCluster(o)
	if err != nil {
		return nil, err
	}
	if err := c.save(); err != nil { // marks Dir as a cluster directory
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	step := func(format string, args ...any) {
		c.logf("[%5.1fs] "+format, append([]any{time.Since(begin).Seconds()}, args...)...)
	}

	pki, err := c.writePKI()
	if err != nil {
		return nil, err
	}

	// Prometheus is independent of Kubernetes: backfill and start it first, wait last.
	prom, err := c.startPrometheus(ctx, o, bins, step)
	if err != nil {
		return nil, err
	}
	if err := c.startEtcd(ctx, bins[Etcd]); err != nil {
		return nil, err
	}
	step("etcd ready")
	if err := c.startAPIServer(ctx, bins[APIServer], pki); err != nil {
		return nil, err
	}
	step("kube-apiserver ready")
	kcm, sched, kwok, err := c.startNodeSide(ctx, o, bins, pki)
	if err != nil {
		return nil, err
	}
	if err := c.createGPUNodes(ctx, o.GPUNodes); err != nil {
		return nil, err
	}
	if err := c.waitNodeSide(ctx, kcm, sched, kwok, step); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, prom, o.ReadyTimeout, httpCheck(plainHTTP, c.PrometheusURL+"/-/ready", "")); err != nil {
		return nil, err
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	step("prometheus ready; cluster up")
	return c, nil
}

// writePKI writes the cluster's certificates and kubeconfigs and makes the admin clients.
func (c *Cluster) writePKI() (pkiPaths, error) {
	pki, err := writePKI(c.Dir, c.APIServerURL)
	if err != nil {
		return pki, fmt.Errorf("certificates: %w", err)
	}
	c.Kubeconfig = pki.AdminKubeconfig
	c.st.Kubeconfig = pki.AdminKubeconfig
	return pki, c.initClients()
}

// createGPUNodes creates the fake GPU nodes gpu-node-0 … gpu-node-<n-1>.
func (c *Cluster) createGPUNodes(ctx context.Context, n int) error {
	for i := range n {
		if err := c.CreateGPUNode(ctx, fmt.Sprintf("gpu-node-%d", i), c.st.GPUsPerNode); err != nil {
			return err
		}
	}
	return nil
}

// prepareDir refuses a directory that holds a running cluster, or that is neither empty
// nor a cluster directory, and otherwise removes a stopped cluster's data from it and
// creates the directories Start writes to.
func prepareDir(dir string) error {
	if old, lerr := loadState(dir); lerr == nil {
		if pids := (&Cluster{st: *old}).PIDs(); len(pids) > 0 {
			return fmt.Errorf("a cluster is already running in %s (pids %v); stop it first (go run ./e2e/cluster down --dir %s)", dir, pids, dir)
		}
	} else if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		// Start deletes etcd/, pki/, logs/... below: only in its own directories.
		return fmt.Errorf("framework: %s is neither empty nor a cluster directory (no %s)", dir, stateFile)
	}
	for _, sub := range []string{"etcd", "prometheus", "logs", "kwok", "pki", "kubeconfig", stateFile} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	for _, sub := range []string{"logs", "prometheus/data", "kwok"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// newCluster returns the not yet started Cluster of o, on free loopback ports.
func newCluster(o Options) (*Cluster, error) {
	pp, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Dir:  o.Dir,
		logf: o.Logf,
		st: state{
			Dir: o.Dir, BinDir: o.BinDir, Detach: o.Detach,
			Ports:       ports{pp[0], pp[1], pp[2], pp[3], pp[4], pp[5], pp[6]},
			GPUsPerNode: o.GPUsPerNode, ScrapeTargets: o.ScrapeTargets, RuleFiles: o.RuleFiles, QueryLog: o.QueryLog,
			StopGrace: o.StopGrace, ReadyTimeout: o.ReadyTimeout,
		},
	}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	c.setURLs()
	return c, nil
}

// startPrometheus writes Prometheus' configuration, backfills o.Backfill with promtool,
// calls o.WriteTSDB, and starts Prometheus without waiting for it to be ready.
func (c *Cluster) startPrometheus(ctx context.Context, o Options, bins map[string]string, step func(string, ...any)) (*process, error) {
	if err := c.writePrometheusConfig(); err != nil {
		return nil, err
	}
	for _, f := range o.Backfill {
		if err := runPromtool(ctx, bins[promtoolBin], f, c.prometheusData()); err != nil {
			return nil, err
		}
	}
	step("backfilled %d file(s)", len(o.Backfill))
	if o.WriteTSDB != nil {
		if err := o.WriteTSDB(ctx, c.prometheusData()); err != nil {
			return nil, fmt.Errorf("writing TSDB blocks: %w", err)
		}
		step("wrote TSDB blocks")
	}
	return c.startPrometheusProcess(bins[Prometheus])
}

// startEtcd starts a one-member etcd and waits until it is healthy.
func (c *Cluster) startEtcd(ctx context.Context, bin string) error {
	p := c.st.Ports
	etcd, err := c.start(Etcd, bin, nil,
		"--name=e2e",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", p.EtcdClient),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", p.EtcdClient),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", p.EtcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", p.EtcdPeer),
		fmt.Sprintf("--initial-cluster=e2e=http://127.0.0.1:%d", p.EtcdPeer),
		"--initial-cluster-state=new",
		"--logger=zap", "--log-outputs=stderr",
	)
	if err != nil {
		return err
	}
	return waitReady(ctx, etcd, c.st.ReadyTimeout, httpCheck(plainHTTP, fmt.Sprintf("http://127.0.0.1:%d/health", p.EtcdClient), `"health":"true"`))
}

// startAPIServer starts kube-apiserver on etcd and waits until /readyz answers ok.
func (c *Cluster) startAPIServer(ctx context.Context, bin string, pki pkiPaths) error {
	apiserver, err := c.start(APIServer, bin, nil,
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.st.Ports.EtcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The endpoint reconciler refuses a loopback advertise address ("may not be in
		// the loopback range"); nothing runs in-cluster, so the kubernetes Service needs
		// no endpoints.
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--secure-port=%d", c.st.Ports.APIServer),
		"--tls-cert-file="+pki.ServingCert,
		"--tls-private-key-file="+pki.ServingKey,
		"--client-ca-file="+pki.CACert,
		"--service-cluster-ip-range="+serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.SAPub,
		"--service-account-signing-key-file="+pki.SAKey,
		"--authorization-mode=Node,RBAC",
		// Without a node lifecycle controller nothing would remove the not-ready taint
		// this plugin puts on new nodes, and pods would never schedule.
		"--disable-admission-plugins=TaintNodesByCondition",
		// Front-proxy (aggregation) settings; without them controller-manager and
		// scheduler log "missing content for CA bundle" errors many times a second.
		"--requestheader-client-ca-file="+pki.FrontProxyCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+pki.FrontProxyClientCert,
		"--proxy-client-key-file="+pki.FrontProxyClientKey,
		"--allow-privileged=true",
		// etcd 3.4.23 (Debian) lacks RequestWatchProgress (needs 3.4.31+), so the watch
		// cache refuses streaming lists; with WatchList on, watches without a resource
		// version are served as streaming lists and fail over and over (kwok then lags
		// seconds behind). Off, clients use plain LIST+WATCH.
		"--feature-gates=WatchList=false",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	apiHTTP, err := rest.HTTPClientFor(c.RESTConfig)
	if err != nil {
		return err
	}
	return waitReady(ctx, apiserver, c.st.ReadyTimeout, httpCheck(apiHTTP, c.APIServerURL+"/readyz", "ok"))
}

// startNodeSide starts kube-controller-manager, kube-scheduler and KWOK, without waiting
// for them.
func (c *Cluster) startNodeSide(ctx context.Context, o Options, bins map[string]string, pki pkiPaths) (kcm, sched, kwok *process, err error) {
	var qps []string
	if o.ClientQPS > 0 {
		qps = []string{fmt.Sprintf("--kube-api-qps=%d", o.ClientQPS), fmt.Sprintf("--kube-api-burst=%d", 2*o.ClientQPS)}
	}
	p := c.st.Ports
	kcm, err = c.start(ControllerManager, bins[ControllerManager], nil, slices.Concat(qps,
		componentFlags(pki.ControllerManagerKubeconf, p.ControllerManager, filepath.Join(o.Dir, "pki", "controller-manager")),
		[]string{
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + pki.SAKey,
			"--root-ca-file=" + pki.CACert,
			"--cluster-signing-cert-file=" + pki.CACert,
			"--cluster-signing-key-file=" + pki.CAKey,
			"--service-cluster-ip-range=" + serviceCIDR,
			// No node IPAM (KWOK assigns pod IPs) and no node lifecycle controller, so fake
			// nodes are never tainted not-ready or evicted.
			"--controllers=" + strings.Join(append([]string{"*", "-node-ipam-controller", "-node-lifecycle-controller"}, prefixed("-", o.DisabledControllers)...), ","),
		})...)
	if err != nil {
		return nil, nil, nil, err
	}
	sched, err = c.start(Scheduler, bins[Scheduler], nil, slices.Concat(qps,
		componentFlags(pki.SchedulerKubeconfig, p.Scheduler, filepath.Join(o.Dir, "pki", "scheduler")))...)
	if err != nil {
		return nil, nil, nil, err
	}
	kwok, err = c.startKWOK(bins[KWOK], pki)
	if err != nil {
		return nil, nil, nil, err
	}
	return kcm, sched, kwok, nil
}

// startKWOK writes KWOK's stages and starts it on the nodes annotated as fake.
func (c *Cluster) startKWOK(bin string, pki pkiPaths) (*process, error) {
	kwokConfig := filepath.Join(c.Dir, "kwok", "kwok.yaml")
	if err := os.WriteFile(kwokConfig, []byte(kwokStages), 0o644); err != nil {
		return nil, err
	}
	return c.start(KWOK, bin,
		// kwok also loads $HOME/.kwok/kwok.yaml when it exists: keep it out.
		[]string{"HOME=" + filepath.Join(c.Dir, "kwok")},
		"--kubeconfig="+pki.AdminKubeconfig,
		"--config="+kwokConfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"=fake",
		fmt.Sprintf("--server-address=127.0.0.1:%d", c.st.Ports.KWOK),
		fmt.Sprintf("--node-port=%d", c.st.Ports.KWOK),
		"--cidr="+podCIDR,
		"--node-lease-duration-seconds=40",
	)
}

// waitNodeSide waits until kube-controller-manager, kube-scheduler and KWOK are healthy,
// the KWOK nodes are Ready and the service-account controller made default/default.
func (c *Cluster) waitNodeSide(ctx context.Context, kcm, sched, kwok *process, step func(string, ...any)) error {
	p, timeout := c.st.Ports, c.st.ReadyTimeout
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := waitReady(ctx, kcm, timeout, httpCheck(insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", p.ControllerManager), "ok")); err != nil {
		return err
	}
	if err := waitReady(ctx, sched, timeout, httpCheck(insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", p.Scheduler), "ok")); err != nil {
		return err
	}
	if err := waitReady(ctx, kwok, timeout, httpCheck(plainHTTP, fmt.Sprintf("http://127.0.0.1:%d/healthz", p.KWOK), "ok")); err != nil {
		return err
	}
	step("controller-manager, scheduler and kwok healthy")
	if err := waitReady(ctx, kwok, timeout, c.nodesReady); err != nil {
		return err
	}
	step("%d KWOK node(s) Ready", len(c.st.Nodes))
	// Pods can only be created once the service-account controller made "default".
	if err := waitReady(ctx, kcm, timeout, c.defaultServiceAccount); err != nil {
		return err
	}
	step("service account default/default exists")
	return nil
}

func (o *Options) setDefaults() error {
	if o.Dir == "" {
		return errors.New("framework: Options.Dir is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	o.Dir = dir
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	if o.BinDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return fmt.Errorf("framework: Options.BinDir not set and %w", err)
		}
		o.BinDir = filepath.Join(root, "bin")
	}
	if o.BinDir, err = filepath.Abs(o.BinDir); err != nil {
		return err
	}
	switch {
	case o.GPUNodes == 0:
		o.GPUNodes = 2
	case o.GPUNodes < 0:
		o.GPUNodes = 0
	}
	if o.GPUsPerNode <= 0 {
		o.GPUsPerNode = 8
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 10 * time.Second
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	for i, f := range o.RuleFiles {
		if o.RuleFiles[i], err = filepath.Abs(f); err != nil {
			return err
		}
	}
	o.ScrapeTargets = append([]string(nil), o.ScrapeTargets...)
	return nil
}

// RepoRoot returns the directory of gpufrac's go.mod, found by walking up from the
// working directory. It errors if there is none.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(b, []byte("module github.com/gpufrac/gpufrac\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/gpufrac/gpufrac above the working directory")
		}
		dir = parent
	}
}

const promtoolBin = "promtool"

// CheckBinaries reports which binaries Start needs are missing from binDir and PATH
// (nil if none). binDir "" means <repo root>/bin. Tests use it to skip cleanly.
func CheckBinaries(binDir string) error {
	if binDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return err
		}
		binDir = filepath.Join(root, "bin")
	}
	_, err := findBinaries(binDir)
	return err
}

func findBinaries(binDir string) (map[string]string, error) {
	bins := map[string]string{}
	var missing []string
	for _, name := range []string{Etcd, APIServer, ControllerManager, Scheduler, KWOK, Prometheus, promtoolBin} {
		path := filepath.Join(binDir, name)
		if st, err := os.Stat(path); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			bins[name] = path
			continue
		}
		if path, err := exec.LookPath(name); err == nil {
			bins[name] = path
			continue
		}
		missing = append(missing, name)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("binaries not found in %s or PATH: %s (kube-* build from tools/k8s, kwok from sigs.k8s.io/kwok/cmd/kwok@v0.8.0, etcd/prometheus/promtool from Debian's etcd-server and prometheus packages)", binDir, strings.Join(missing, ", "))
	}
	return bins, nil
}

func (c *Cluster) setURLs() {
	c.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", c.st.Ports.APIServer)
	c.PrometheusURL = fmt.Sprintf("http://127.0.0.1:%d", c.st.Ports.Prometheus)
}

func (c *Cluster) initClients() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %s: %w", c.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	c.RESTConfig = cfg
	c.Scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(c.Scheme); err != nil {
		return err
	}
	c.Client, err = client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	return nil
}

// start launches a component and records it in the state file.
func (c *Cluster) start(name, bin string, env []string, args ...string) (*process, error) {
	p, err := startProcess(c.Dir, name, bin, args, env, c.st.Detach)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.st.Processes = append(c.st.Processes, p)
	c.mu.Unlock()
	c.logf("started %s (pid %d), log %s", name, p.PID, p.Log)
	return p, c.save()
}

// save writes <Dir>/state.json.
func (c *Cluster) save() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := json.MarshalIndent(&c.st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.Dir, stateFile))
}

// Load re-opens a cluster started in dir (typically a detached one started by
// `go run ./e2e/cluster up`) from its state file, so it can be used or stopped. It
// errors if dir holds no state file or the kubeconfig cannot be loaded; it does not
// check that the processes still run (see PIDs).
func Load(dir string) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := loadState(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, st: *st, logf: func(string, ...any) {}}
	c.Kubeconfig = c.st.Kubeconfig
	c.setURLs()
	if err := c.initClients(); err != nil {
		return nil, err
	}
	return c, nil
}

func loadState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &st, nil
}

// PIDs returns the PIDs of the cluster's processes that are still running, by
// component name.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for _, p := range c.st.Processes {
		if p.alive() {
			m[p.Name] = p.PID
		}
	}
	return m
}

// NodeNames returns the names of the fake GPU nodes created so far.
func (c *Cluster) NodeNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.st.Nodes...)
}

// LogPath returns the log file of a component (e.g. framework.APIServer).
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.Dir, "logs", component+".log")
}

// Stop stops every process the cluster started, in reverse start order, by PID:
// SIGTERM, then SIGKILL after the grace period (Options.StopGrace). It returns the
// joined errors of processes that could not be stopped; calling it again is harmless.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	procs := append([]*process(nil), c.st.Processes...)
	grace := c.st.StopGrace
	c.mu.Unlock()
	if grace <= 0 {
		grace = 10 * time.Second
	}
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(grace); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Cluster) findProcess(name string) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.st.Processes) - 1; i >= 0; i-- {
		if c.st.Processes[i].Name == name {
			return c.st.Processes[i]
		}
	}
	return nil
}

var plainHTTP = &http.Client{}

// httpCheck returns a readiness check: GET url must answer 200 and, if want is not
// empty, a body containing want.
func httpCheck(hc *http.Client, url, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		if want != "" && !strings.Contains(string(body), want) {
			return fmt.Errorf("GET %s: body %q lacks %q", url, body, want)
		}
		return nil
	}
}

// componentFlags are the flags kube-controller-manager and kube-scheduler share: their
// kubeconfig for the API server, authentication and authorization; serving on
// 127.0.0.1:port with the self-signed certificates they write to certDir; no leader
// election and no profiling.
func componentFlags(kubeconfig string, port int, certDir string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + certDir,
		"--leader-elect=false",
		"--profiling=false",
	}
}

// prefixed returns each of names with prefix in front.
func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}
