package trace

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufrac/gpufrac/workload"
)

// validateNames reports a namespace or container name that is no DNS-1123 label, or a
// Deployment name prefix whose names ("<prefix>-000") are no DNS-1123 subdomain, the
// way the API server would refuse the objects (apimachinery's validation); the flag
// names each value (--namespace, --container, prefixFlag). Empty values take the
// defaults and pass.
func validateNames(namespace, container, prefix, prefixFlag string) error {
	return invalidName(
		nameCheck{"--namespace", namespace, validation.IsDNS1123Label},
		nameCheck{"--container", container, validation.IsDNS1123Label},
		nameCheck{prefixFlag, prefix, func(p string) []string { return validation.IsDNS1123Subdomain(deploymentName(p, 0)) }},
	)
}

// nameCheck is one name the API server must accept: what gives it (a flag, a CSV
// column), its value, and apimachinery's validation for its kind of name
// (validation.IsDNS1123Label or IsDNS1123Subdomain).
type nameCheck struct {
	what, value string
	errs        func(string) []string
}

// invalidName returns an error for the first of checks whose value the API server would
// refuse ("<what> <value>: not a valid Kubernetes name: <why>"), or nil. An empty value
// passes: it takes a default, or was refused before as missing.
func invalidName(checks ...nameCheck) error {
	for _, c := range checks {
		if c.value == "" {
			continue
		}
		if errs := c.errs(c.value); len(errs) > 0 {
			return fmt.Errorf("%s %q: not a valid Kubernetes name: %s", c.what, c.value, strings.Join(errs, "; "))
		}
	}
	return nil
}

// TemplateHash returns a 10-character pod-template-hash in workload.SafeAlphabet derived
// deterministically from seed (for example the sorted source IDs of a Deployment's
// trace pods).
func TemplateHash(seed string) string { return safeEncode("template-hash/"+seed, 10) }

// PodSuffix returns the 5-character random-looking pod name suffix in workload.SafeAlphabet
// that a ReplicaSet appends to its pods' names, derived deterministically from seed
// (for example the trace pod's container_ip).
func PodSuffix(seed string) string { return safeEncode("pod-suffix/"+seed, 5) }

// safeEncode maps the first n bytes of seed's SHA-256 into workload.SafeAlphabet, byte
// by byte as Kubernetes' rand.SafeEncodeString does rune by rune (that function reads
// its input as UTF-8, so it cannot take raw hash bytes).
func safeEncode(seed string, n int) string {
	sum := sha256.Sum256([]byte(seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = workload.SafeAlphabet[int(sum[i])%len(workload.SafeAlphabet)]
	}
	return string(b)
}

var deploymentPodName = regexp.MustCompile(`^(.+)-([` + workload.SafeAlphabet + `]{1,10})-([` + workload.SafeAlphabet + `]{5})$`)

// SplitDeploymentPodName splits a pod name made by the Deployment controller,
// "<deployment>-<pod-template-hash>-<suffix>" (hash 1–10 and suffix 5 characters of
// workload.SafeAlphabet), into the Deployment and ReplicaSet names. ok is false when the name
// does not follow the convention.
func SplitDeploymentPodName(pod string) (deployment, replicaSet string, ok bool) {
	m := deploymentPodName.FindStringSubmatch(pod)
	if m == nil {
		return "", "", false
	}
	return m[1], m[1] + "-" + m[2], true
}

// namePods gives the pods of one Deployment their ReplicaSet and pod names:
// ReplicaSet "<deploy>-<TemplateHash(hashSeed)>", pods "<ReplicaSet>-<PodSuffix(seed)>"
// with podSeeds[i] as seed; a suffix that collides within the ReplicaSet is redrawn
// from the seed and a counter, so names stay deterministic and unique.
func namePods(deploy, hashSeed string, podSeeds []string) (rs string, pods []string) {
	rs = deploy + "-" + TemplateHash(hashSeed)
	used := map[string]bool{}
	for _, s := range podSeeds {
		suf := PodSuffix(s)
		for n := 1; used[suf]; n++ {
			suf = PodSuffix(s + "#" + strconv.Itoa(n))
		}
		used[suf] = true
		pods = append(pods, rs+"-"+suf)
	}
	return rs, pods
}

// deploymentName returns "<prefix>-NNN" (three digits, more when needed).
func deploymentName(prefix string, i int) string { return fmt.Sprintf("%s-%03d", prefix, i) }

// stableUUID formats the first 16 bytes of SHA-256(kind + "/" + key) as a UUID
// (8-4-4-4-12 lowercase hex).
func stableUUID(kind, key string) string {
	sum := sha256.Sum256([]byte(kind + "/" + key))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// key is the identity writers derive fake UUIDs and node names from.
func (p *Pod) key() string { return p.Namespace + "/" + p.Pod + "/" + p.Container }
