{{/* Names ---------------------------------------------------------------------------- */}}

{{- define "gpufrac.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Resource name prefix: the release name, plus the chart name unless it contains it.
Truncated so that "<fullname>-recommender" stays within 63 characters. */}}
{{- define "gpufrac.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<component>"; call with (dict "root" $ "component" "recommender"). */}}
{{- define "gpufrac.componentName" -}}
{{- printf "%s-%s" (include "gpufrac.fullname" .root) .component -}}
{{- end -}}

{{- define "gpufrac.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels --------------------------------------------------------------------------- */}}

{{- define "gpufrac.labels" -}}
helm.sh/chart: {{ include "gpufrac.chart" . }}
app.kubernetes.io/name: {{ include "gpufrac.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpufrac
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of a component's objects; (dict "root" $ "component" "recommender"). */}}
{{- define "gpufrac.componentLabels" -}}
{{ include "gpufrac.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Selector labels of a component's pods (immutable: never add labels here). */}}
{{- define "gpufrac.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpufrac.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Component settings ---------------------------------------------------------------- */}}

{{/* Service account name of a component. */}}
{{- define "gpufrac.serviceAccountName" -}}
{{- $c := index .root.Values .component -}}
{{- if $c.serviceAccount.create -}}
{{- default (include "gpufrac.componentName" .) $c.serviceAccount.name -}}
{{- else -}}
{{- default "default" $c.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Image reference of a component: repository@digest or repository:tag. */}}
{{- define "gpufrac.image" -}}
{{- $c := index .root.Values .component -}}
{{- if $c.image.digest -}}
{{- printf "%s@%s" $c.image.repository $c.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $c.image.repository (default (default .root.Chart.AppVersion .root.Values.image.tag) $c.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Pod security context of a component (its own, else podDefaults). */}}
{{- define "gpufrac.podSecurityContext" -}}
{{- $c := index .root.Values .component -}}
{{- toYaml (default .root.Values.podDefaults.podSecurityContext $c.podSecurityContext) -}}
{{- end -}}

{{- define "gpufrac.securityContext" -}}
{{- $c := index .root.Values .component -}}
{{- toYaml (default .root.Values.podDefaults.securityContext $c.securityContext) -}}
{{- end -}}

{{- define "gpufrac.priorityClassName" -}}
{{- $c := index .root.Values .component -}}
{{- default .root.Values.podDefaults.priorityClassName $c.priorityClassName -}}
{{- end -}}

{{/* Default affinity: spread a component's replicas over nodes (preferred). */}}
{{- define "gpufrac.affinity" -}}
{{- $c := index .root.Values .component -}}
{{- if $c.affinity -}}
{{- toYaml $c.affinity -}}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "gpufrac.selectorLabels" . | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* Scheduling and pod-level settings shared by the Deployments. */}}
{{- define "gpufrac.podScheduling" -}}
{{- $c := index .root.Values .component -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "gpufrac.priorityClassName" . }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
  {{- include "gpufrac.affinity" . | nindent 2 }}
{{- with $c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Names of objects shared between components ----------------------------------------- */}}

{{- define "gpufrac.admission.secretName" -}}
{{- default (printf "%s-admission-tls" (include "gpufrac.fullname" .)) .Values.admission.certificates.secretName -}}
{{- end -}}

{{- define "gpufrac.admission.webhookName" -}}
{{- printf "%s-admission" (include "gpufrac.fullname" .) -}}
{{- end -}}

{{/* The admission webhook's status Lease: the binaries' default name
(statuslease.DefaultName), which the updater reads in its own namespace. */}}
{{- define "gpufrac.admission.statusLeaseName" -}}
gpufrac-admission-status
{{- end -}}

{{- define "gpufrac.admission.certificateName" -}}
{{- printf "%s-admission" (include "gpufrac.fullname" .) -}}
{{- end -}}

{{/* The recommender's leader-election Lease (fixed in the recommender binary). */}}
{{/* The recommender instance's status Lease (statuslease.RecommenderLeaseName). */}}
{{- define "gpufrac.recommender.statusLeaseName" -}}
gpufrac-recommender-status-{{ .Values.recommender.name | default "default" }}
{{- end -}}

{{- define "gpufrac.recommender.leaseName" -}}
gpufrac-recommender.autoscaling.gpufrac.io{{ if ne (.Values.recommender.name | default "default") "default" }}-{{ .Values.recommender.name }}{{ end }}
{{- end -}}

{{/* Whether the admission webhook uses the self-managed certificate. */}}
{{- define "gpufrac.admission.selfManaged" -}}
{{- if eq .Values.admission.certificates.mode "self-managed" }}true{{ end -}}
{{- end -}}

{{/* A CEL string literal, quoted and escaped the way the admission binary does it
(admission.celString), so the chart's matchConditions equal what it registers. */}}
{{- define "gpufrac.celString" -}}
'{{ . | replace "\\" "\\\\" | replace "'" "\\'" }}'
{{- end -}}

{{/* Namespaces never sent to the pod webhook, in the admission binary's order:
kube-system, the release namespace, then excludeNamespaces without duplicates. */}}
{{- define "gpufrac.admission.excludedNamespaces" -}}
{{- $ns := list "kube-system" -}}
{{- if ne .Release.Namespace "kube-system" -}}
{{- $ns = append $ns .Release.Namespace -}}
{{- end -}}
{{- range .Values.admission.webhook.excludeNamespaces -}}
{{- if and . (not (has . $ns)) -}}
{{- $ns = append $ns . -}}
{{- end -}}
{{- end -}}
{{- toJson $ns -}}
{{- end -}}

{{/* admission.webhook.namespaceSelector as the binary's --namespace-label-selector
("k1=v1,k2=v2", keys sorted; empty when unset). */}}
{{- define "gpufrac.admission.namespaceLabelSelector" -}}
{{- $sel := .Values.admission.webhook.namespaceSelector -}}
{{- $pairs := list -}}
{{- range $k := keys $sel | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%s" $k (index $sel $k | toString)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* Prometheus flags and the volumes/mounts of the secrets they read. */}}
{{- define "gpufrac.prometheusArgs" -}}
{{- $p := .Values.prometheus -}}
- --prometheus-url={{ $p.url }}
{{- with $p.timeout }}
- --prometheus-timeout={{ . }}
{{- end }}
{{- range $k, $v := $p.headers }}
- --prometheus-header={{ $k }}={{ $v }}
{{- end }}
{{- if $p.insecureSkipVerify }}
- --prometheus-insecure-skip-verify
{{- end }}
{{- if $p.bearerToken.secretName }}
- --prometheus-bearer-token-file=/etc/gpufrac/prometheus/bearer/{{ $p.bearerToken.key }}
{{- end }}
{{- if $p.basicAuth.username }}
- --prometheus-basic-auth-username={{ $p.basicAuth.username }}
{{- end }}
{{- if $p.basicAuth.passwordSecretName }}
- --prometheus-basic-auth-password-file=/etc/gpufrac/prometheus/basic-auth/{{ $p.basicAuth.passwordKey }}
{{- end }}
{{- if $p.tls.caSecretName }}
- --prometheus-ca-file=/etc/gpufrac/prometheus/ca/{{ $p.tls.caKey }}
{{- end }}
{{- if $p.tls.clientCertSecretName }}
- --prometheus-cert-file=/etc/gpufrac/prometheus/client/tls.crt
- --prometheus-key-file=/etc/gpufrac/prometheus/client/tls.key
{{- end }}
{{- end -}}

{{- define "gpufrac.prometheusVolumes" -}}
{{- $p := .Values.prometheus -}}
{{- if $p.bearerToken.secretName }}
- name: prometheus-bearer
  secret:
    secretName: {{ $p.bearerToken.secretName }}
{{- end }}
{{- if $p.basicAuth.passwordSecretName }}
- name: prometheus-basic-auth
  secret:
    secretName: {{ $p.basicAuth.passwordSecretName }}
{{- end }}
{{- if $p.tls.caSecretName }}
- name: prometheus-ca
  secret:
    secretName: {{ $p.tls.caSecretName }}
{{- end }}
{{- if $p.tls.clientCertSecretName }}
- name: prometheus-client
  secret:
    secretName: {{ $p.tls.clientCertSecretName }}
{{- end }}
{{- end -}}

{{- define "gpufrac.prometheusVolumeMounts" -}}
{{- $p := .Values.prometheus -}}
{{- if $p.bearerToken.secretName }}
- name: prometheus-bearer
  mountPath: /etc/gpufrac/prometheus/bearer
  readOnly: true
{{- end }}
{{- if $p.basicAuth.passwordSecretName }}
- name: prometheus-basic-auth
  mountPath: /etc/gpufrac/prometheus/basic-auth
  readOnly: true
{{- end }}
{{- if $p.tls.caSecretName }}
- name: prometheus-ca
  mountPath: /etc/gpufrac/prometheus/ca
  readOnly: true
{{- end }}
{{- if $p.tls.clientCertSecretName }}
- name: prometheus-client
  mountPath: /etc/gpufrac/prometheus/client
  readOnly: true
{{- end }}
{{- end -}}

{{/* POD_NAMESPACE and POD_NAME from the downward API. */}}
{{- define "gpufrac.podEnv" -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/* The webhook's configuration flags (admission.Config, backend.Config). The updater takes the same
ones, so it reads backend fields, overheads and the minimum confidence exactly as the
webhook writes and applies them. */}}
{{- define "gpufrac.admissionConfigArgs" -}}
{{- $c := .Values.admission -}}
- --gpu-memory={{ .Values.gpuMemory }}
- --gpu-resource-prefix={{ $c.gpuResourcePrefix }}
{{- if ne (toString $c.minConfidence) "" }}
- --min-confidence={{ $c.minConfidence }}
{{- end }}
{{- with $c.memoryOverhead }}
{{- $pairs := list }}
{{- range $k := keys . | sortAlpha }}
{{- $pairs = append $pairs (printf "%s=%s" $k (index $c.memoryOverhead $k | toString)) }}
{{- end }}
- --memory-overhead={{ join "," $pairs }}
{{- end }}
{{- with $c.kai.mode }}
- --kai-mode={{ . }}
{{- end }}
{{- with $c.kai.schedulerName }}
- --kai-scheduler-name={{ . }}
{{- end }}
{{- with $c.kai.queue }}
- --kai-queue={{ . }}
{{- end }}
{{- with $c.mps.replicaMemory }}
- --mps-replica-memory={{ . }}
{{- end }}
{{- with $c.configArgs }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The updater's leader-election Lease (fixed in the updater binary). */}}
{{- define "gpufrac.updater.leaseName" -}}
gpufrac-updater.autoscaling.gpufrac.io
{{- end -}}

{{/* Checks of settings the schema cannot express. */}}
{{- define "gpufrac.validate" -}}
{{- if and .Values.recommender.enabled (gt (int .Values.recommender.replicas) 1) (not .Values.recommender.leaderElection) -}}
{{- fail "recommender.replicas > 1 needs recommender.leaderElection=true" -}}
{{- end -}}
{{- if and .Values.updater.enabled (gt (int .Values.updater.replicas) 1) (not .Values.updater.leaderElection) -}}
{{- fail "updater.replicas > 1 needs updater.leaderElection=true" -}}
{{- end -}}
{{- include "gpufrac.validateGPUMemory" (list "gpuMemory" .Values.gpuMemory) -}}
{{- include "gpufrac.validateWebhookTimeout" . -}}
{{- include "gpufrac.validateStartValues" . -}}
{{- include "gpufrac.validatePorts" . -}}
{{- include "gpufrac.validateDisruptionBudgets" . -}}
{{- if .Values.agent.simulate.enabled -}}
{{- include "gpufrac.validateGPUMemory" (list "agent.simulate.gpuMemory" .Values.agent.simulate.gpuMemory) -}}
{{- end -}}
{{- end -}}

{{/* Seconds of a Go duration the schema took (such as 1h30m, 500ms, 1.5h), as a float;
"" is 0. */}}
{{- define "gpufrac.durationSeconds" -}}
{{- $scale := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $sum := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $sum = addf $sum (mulf (float64 $num) (get $scale (trimPrefix $num .))) -}}
{{- end -}}
{{- $sum -}}
{{- end -}}

{{/* Values the binaries refuse at start (each error names its flag), refused here so that
helm install fails instead of installing pods that crash-loop: a period of 0
(recommender and updater, bootstrap.Positive), an --eviction-rate of 0 (negative is no
limit), an agent --interval under 1s, and a self-managed certificate lifetime of at most
3 x --cert-check-interval (1m unless admission.extraArgs sets it: renewed with a third
left, so a check must fall in that third). */}}
{{- define "gpufrac.validateStartValues" -}}
{{- $v := .Values -}}
{{- $positive := list -}}
{{- if $v.recommender.enabled -}}
{{- $r := $v.recommender -}}
{{- $positive = concat $positive (list (list "prometheus.timeout" "--prometheus-timeout" $v.prometheus.timeout "recommender") (list "recommender.interval" "--interval" $r.interval "recommender") (list "recommender.historyLength" "--history-length" $r.historyLength "recommender") (list "recommender.checkpoints.interval" "--checkpoint-interval" $r.checkpoints.interval "recommender") (list "recommender.sharingPlanner.interval" "--sharing-plan-interval" $r.sharingPlanner.interval "recommender")) -}}
{{- end -}}
{{- if $v.updater.enabled -}}
{{- $positive = append $positive (list "updater.interval" "--interval" $v.updater.interval "updater") -}}
{{- if and (ne (toString $v.updater.evictionRate) "") (eq (float64 $v.updater.evictionRate) 0.0) -}}
{{- fail (printf "updater.evictionRate %v: the updater refuses --eviction-rate 0 at start; want evictions per second above 0, or a negative value for no limit" $v.updater.evictionRate) -}}
{{- end -}}
{{- end -}}
{{- range $positive -}}
{{- $val := index . 2 | toString -}}
{{- if and (ne $val "") (le (include "gpufrac.durationSeconds" $val | float64) 0.0) -}}
{{- fail (printf "%s %q: the %s refuses %s of 0 at start; want a duration above 0, or empty for its default" (index . 0) $val (index . 3) (index . 1)) -}}
{{- end -}}
{{- end -}}
{{- if and $v.agent.enabled (lt (include "gpufrac.durationSeconds" $v.agent.interval | float64) 1.0) -}}
{{- fail (printf "agent.interval %q: the agent refuses an --interval under 1s at start (NVML's sample period is up to 1s)" (toString $v.agent.interval)) -}}
{{- end -}}
{{- if and $v.admission.enabled (eq $v.admission.certificates.mode "self-managed") -}}
{{- $check := 60.0 -}}
{{- $checkArg := "" -}}
{{- range $a := $v.admission.extraArgs -}}
{{- $m := regexFind "^--?cert-check-interval=.*$" (toString $a) -}}
{{- if $m -}}{{- $checkArg = regexReplaceAll "^--?cert-check-interval=" $m "" -}}{{- end -}}
{{- end -}}
{{- if $checkArg -}}{{- $check = include "gpufrac.durationSeconds" $checkArg | float64 -}}{{- end -}}
{{- range $name := list "caValidity" "certValidity" -}}
{{- $val := index $v.admission.certificates $name | toString -}}
{{- if le (include "gpufrac.durationSeconds" $val | float64) (mulf 3 $check) -}}
{{- fail (printf "admission.certificates.%s %q: the webhook refuses a certificate lifetime of at most 3 x --cert-check-interval (%s) at start: it is renewed with a third of it left, so a check must fall in that third" $name $val (default "1m" $checkArg)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The ports one container listens on are distinct: two servers on one port end the
process at start (bind: address already in use), and its pods crash-loop. */}}
{{- define "gpufrac.validatePorts" -}}
{{- range $comp := list "recommender" "updater" "admission" -}}
{{- $c := index $.Values $comp -}}
{{- if $c.enabled -}}
{{- $ports := list (list "metricsPort" $c.metricsPort) (list "probePort" $c.probePort) -}}
{{- if eq $comp "admission" -}}{{- $ports = append $ports (list "webhook.port" $c.webhook.port) -}}{{- end -}}
{{- $seen := dict -}}
{{- range $ports -}}
{{- $port := index . 1 | toString -}}
{{- if hasKey $seen $port -}}
{{- fail (printf "%s.%s and %s.%s are both %s: the %s container listens on each, and the second fails to bind at start; give each its own port" $comp (get $seen $port) $comp (index . 0) $port $comp) -}}
{{- end -}}
{{- $_ := set $seen $port (index . 0) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A rendered PodDisruptionBudget lets at least one pod go: minAvailable below replicas
(admission), maxUnavailable above 0 (recommender, updater). One that lets none refuses
every eviction of the component's pods, so kubectl drain, a cluster upgrade or the
cluster autoscaler's scale-down waits on it for ever. */}}
{{- define "gpufrac.validateDisruptionBudgets" -}}
{{- range $comp := list "recommender" "updater" "admission" -}}
{{- $c := index $.Values $comp -}}
{{- if and $c.enabled $c.podDisruptionBudget.enabled (gt (int $c.replicas) 1) -}}
{{- $key := ternary "minAvailable" "maxUnavailable" (eq $comp "admission") -}}
{{- $v := index $c.podDisruptionBudget $key | toString -}}
{{- $pct := hasSuffix "%" $v -}}
{{- $n := trimSuffix "%" $v | float64 -}}
{{- $blocks := false -}}
{{- if eq $key "minAvailable" -}}
{{- /* A percentage is rounded up to pods, as the disruption controller does. */ -}}
{{- $pods := ternary (ceil (divf (mulf $n (float64 $c.replicas)) 100.0)) $n $pct -}}
{{- $blocks = ge $pods (float64 $c.replicas) -}}
{{- else -}}
{{- $blocks = le $n 0.0 -}}
{{- end -}}
{{- if $blocks -}}
{{- fail (printf "%s.podDisruptionBudget.%s %s with %s.replicas %v lets no pod be evicted: node drains and cluster upgrades would wait on it for ever; use %s, or podDisruptionBudget.enabled=false" $comp $key $v $comp $c.replicas (ternary (printf "at most %d" (sub (int $c.replicas) 1)) "1 or more" (eq $key "minAvailable"))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The 1Gi minimum of a GPU memory (backend.ParseGPUMemory, every --gpu-memory): a
value under it is a unit left off ("80" for 80Gi). The schema checks the units. */}}
{{- define "gpufrac.validateGPUMemory" -}}
{{- $name := index . 0 -}}
{{- $v := index . 1 | toString -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?([eE][0-9]+)?" $v -}}
{{- $unit := trimSuffix "B" (trimPrefix $num $v) -}}
{{- $scale := dict "" 1.0 "m" 0.001 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if and (hasKey $scale $unit) (lt (mulf (float64 $num) (get $scale $unit)) 1073741824.0) -}}
{{- fail (printf "%s %q is under 1Gi: want the memory of one GPU with its unit, such as 80Gi" $name $v) -}}
{{- end -}}
{{- end -}}

{{/* admission.webhook.timeoutSeconds must hold the waits of one pod request
(admission.Config.CheckTimeout): --owner-wait (200ms; 0 also means 200ms) plus the
longer of --dra-timeout and --device-plugin-timeout (1s each; 0 also means 1s) plus
250ms, 1.45s by default. With 1 second the webhook refuses to start unless both backend
timeouts are lowered (configArgs or admission.extraArgs); the binary then checks the
values themselves. */}}
{{- define "gpufrac.validateWebhookTimeout" -}}
{{- $c := .Values.admission -}}
{{- if and $c.enabled (lt (int $c.webhook.timeoutSeconds) 2) -}}
{{- $args := concat ($c.configArgs | default list) ($c.extraArgs | default list) -}}
{{- $missing := list -}}
{{- range $flag := list "dra-timeout" "device-plugin-timeout" -}}
{{- $set := false -}}
{{- range $args -}}
{{- if regexMatch (printf "^--?%s(=.*)?$" $flag) (toString .) -}}{{- $set = true -}}{{- end -}}
{{- end -}}
{{- if not $set -}}{{- $missing = append $missing (printf "--%s" $flag) -}}{{- end -}}
{{- end -}}
{{- if $missing -}}
{{- fail (printf "admission.webhook.timeoutSeconds %v is under what one pod request may wait with %s left at the default (1s): --owner-wait (200ms) + max(--dra-timeout, --device-plugin-timeout) + 250ms is 1.45s, so the webhook would refuse to start; use 2 or 3, or lower both in admission.configArgs" $c.webhook.timeoutSeconds (join " and " $missing)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* GOMEMLIMIT at the container's memory limit (bytes, Go's soft limit) when the component
has one and its extraEnv does not set GOMEMLIMIT itself: the garbage collector works
harder near the limit instead of letting the heap grow to twice the live heap (GOGC=100)
and reach the OOM killer (the recommender's history bootstrap, the webhook's and the
updater's cluster-wide informer caches). (dict "root" $ "component" "admission") */}}
{{- define "gpufrac.goMemLimitEnv" -}}
{{- $c := index .root.Values .component -}}
{{- $set := false -}}
{{- range $c.extraEnv }}{{ if eq .name "GOMEMLIMIT" }}{{ $set = true }}{{ end }}{{ end -}}
{{- if and (not $set) (dig "limits" "memory" "" ($c.resources | default dict)) }}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      resource: limits.memory
      divisor: "1"
{{- end -}}
{{- end -}}
