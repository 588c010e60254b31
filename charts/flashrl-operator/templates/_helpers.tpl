{{/*
Names and labels.
*/}}
{{- define "flashrl-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "flashrl-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "flashrl-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "flashrl-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flashrl-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "flashrl-operator.labels" -}}
helm.sh/chart: {{ include "flashrl-operator.chart" . }}
{{ include "flashrl-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: flashrl
{{- end }}

{{- define "flashrl-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "flashrl-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The project's pins file (images/pins.yaml, shipped in the chart through the pins.yaml symlink), parsed.
It is the only record of image references: values override it, never copy it.
*/}}
{{- define "flashrl-operator.pins" -}}
{{- $raw := .Files.Get "pins.yaml" }}
{{- if not $raw }}
{{- fail "pins.yaml is missing from the chart (it is a symlink to images/pins.yaml; package the chart from the repository)" }}
{{- end }}
{{- $raw }}
{{- end }}

{{/*
The operator image: values.image.* when set, else the pinned repository and tag.
*/}}
{{- define "flashrl-operator.image" -}}
{{- $pins := include "flashrl-operator.pins" . | fromYaml }}
{{- $pinned := $pins.images.operator }}
{{- $repository := .Values.image.repository | default $pinned.repository }}
{{- $tag := .Values.image.tag | default $pinned.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" $repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/*
The trainer image for jobs that name none: the defaultTrainerImage value, else the pinned trainer image
(with its digest once recorded).
*/}}
{{- define "flashrl-operator.trainerImage" -}}
{{- if .Values.defaultTrainerImage }}
{{- .Values.defaultTrainerImage }}
{{- else }}
{{- $pins := include "flashrl-operator.pins" . | fromYaml }}
{{- $pinned := $pins.images.trainer }}
{{- if and $pinned.digest (ne $pinned.digest "unresolved") }}
{{- printf "%s:%s@%s" $pinned.repository $pinned.tag $pinned.digest }}
{{- else }}
{{- printf "%s:%s" $pinned.repository $pinned.tag }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The operator's permissions, in one place: used by the ClusterRole (cluster-wide mode) and by each
namespaced Role (watchNamespaces mode). No wildcards.
*/}}
{{- define "flashrl-operator.rules" -}}
# Exactly what the operator does (docs/operator.md, "RBAC"); children go by ownerReference garbage
# collection, except a failed attempt's RayJob, deleted to free its GPUs before the next attempt.
# FlashRLJobs: watch them; patch sets spec.lifecycle.suspend when spec.correction.guard suspends a
# drifting job (action Suspend).
# create: a FlashRLExperiment's variants are FlashRLJobs the operator creates (owned by the
# experiment, so they go with it by garbage collection).
- apiGroups: ["flashrl.dev"]
  resources: ["flashrljobs"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Status: phase, conditions. Also the verbs each job's launcher Role grants (get, patch on its own
# flashrljobs/status): Kubernetes only lets the operator grant what it holds.
- apiGroups: ["flashrl.dev"]
  resources: ["flashrljobs/status"]
  verbs: ["get", "patch"]
# FlashRLExperiments: watched; their status gathers the variants' phase, step and latest metrics.
- apiGroups: ["flashrl.dev"]
  resources: ["flashrlexperiments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["flashrl.dev"]
  resources: ["flashrlexperiments/status"]
  verbs: ["get", "patch"]
# The RayJob of each attempt of a FlashRLJob; watched to mirror its status. A failed attempt's RayJob
# is deleted when the next attempt starts, so its Ray cluster does not hold the GPUs until its TTL.
- apiGroups: ["ray.io"]
  resources: ["rayjobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The RayCluster KubeRay creates for each RayJob, read by name for ClusterReady (pod progress,
# ReplicaFailure); and listed by KubeRay's ray.io/originated-from-cr-name label for an ended attempt,
# until its GPU workers are gone (the goodput ledger counts its GPUs released from then on, and an
# experiment starts its next variant). Watched (by our labels, which KubeRay copies from the RayJob):
# KubeRay deletes the workers of a finished RayJob without changing the RayJob. patch: a queued job's
# ended cluster gets its worker groups suspended (KubeRay's DeleteWorkers rule cannot be rendered beside
# the shutdownAfterJobFinishes Kueue requires), so its GPUs go at once and the head stays for the TTL.
- apiGroups: ["ray.io"]
  resources: ["rayclusters"]
  verbs: ["get", "list", "watch", "patch"]
# Kueue's Workload of a queued RayJob, listed by its job-uid label while Kueue has not admitted the job,
# so the status names the workload and why it waits.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list"]
# The RayCluster's pods, listed by the ray.io/cluster label while the cluster is starting, so
# ClusterReady can say why a pod is not (Unschedulable, image pull, missing Secret), and an ended
# attempt's worker pods until none is left; and a failed staging Job's pods, for the stage command's
# reason.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# The staging Job (a CPU-only flashrl-launch stage before the RayJob when model or data come from
# Hugging Face): created, watched for its outcome. Its pods are listed (above) for a failure's message.
# delete (here and for the children below): a new job whose child's name is taken by someone else's
# object removes what it created a moment before, each under the UID it was created with.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The claims sources are staged into: read, and annotated with what is staged there, so the next
# job using the same source on the same claim runs no staging Job.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "patch"]
# Per-job ConfigMap (spec + verl overrides) and the launcher's ServiceAccount. Created, and restored
# by server-side apply (patch) when they drift.
- apiGroups: [""]
  resources: ["configmaps", "serviceaccounts"]
  verbs: ["get", "create", "patch", "delete"]
# Per-job Role/RoleBinding letting the launcher patch its own FlashRLJob status.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "patch", "delete"]
# Per-job NetworkPolicy closing the job's Ray pods to everything but the job, KubeRay and monitoring.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch", "delete"]
# Events on FlashRLJobs (core v1 Events, as kubectl describe shows them).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{- /* Cluster-wide mode only: kopf watches CRDs to notice resources appearing (read-only); the GPU
nodes are listed, and the PriorityClass a new job's pods name is read, before the job creates anything,
so a job whose GPU pods can never fit (NeverFits) or whose PriorityClass does not exist
(PriorityClassNotFound) fails at once. In namespace-scoped mode there is no ClusterRole; kopf logs that it
cannot list CRDs, and the operator that it cannot list nodes nor read PriorityClasses (such a job then
waits for its startup deadline). */}}
{{- define "flashrl-operator.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list"]
- apiGroups: ["scheduling.k8s.io"]
  resources: ["priorityclasses"]
  verbs: ["get"]
{{- end }}

{{- /* Leader election is on when asked for, and always with more than one replica. */}}
{{- define "flashrl-operator.leaderElection" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicas) 1) }}true{{- end }}
{{- end }}

{{- /*
The chart's labels with the user's merged in: one map, so a key the user also sets (grafana_dashboard,
or a chart label) appears once, with the user's value. Call with
(dict "ctx" $ "fixed" (dict ...) "extra" (list userMap ...)): fixed are the object's own labels beyond
the chart's; extra maps are merged in order, the earlier winning.
*/}}
{{- define "flashrl-operator.mergedLabels" -}}
{{- $merged := dict }}
{{- range .extra }}
{{- $merged = mustMerge $merged (deepCopy (. | default dict)) }}
{{- end }}
{{- $merged = mustMerge $merged (.fixed | default dict) (include "flashrl-operator.labels" .ctx | fromYaml) }}
{{- toYaml $merged }}
{{- end }}

{{- /*
A Prometheus duration (the Prometheus Operator's own grammar: 1y2w3d4h5m6s7ms, or 0) in milliseconds.
*/}}
{{- define "flashrl-operator.durationMs" -}}
{{- $ms := 0 }}
{{- $units := dict "y" 31536000000 "w" 604800000 "d" 86400000 "h" 3600000 "m" 60000 "s" 1000 "ms" 1 }}
{{- range regexFindAll "[0-9]+(ms|y|w|d|h|m|s)" (toString .) -1 }}
{{- $number := regexFind "^[0-9]+" . }}
{{- $ms = add $ms (mul (atoi $number) (get $units (trimPrefix $number .))) }}
{{- end }}
{{- $ms }}
{{- end }}

{{- /*
Fail when a scrape's timeout is longer than its interval (Prometheus refuses such a scrape config, and
the Prometheus Operator drops the whole monitor). Call with (dict "what" "values path" "scrape" values).
*/}}
{{- define "flashrl-operator.checkScrape" -}}
{{- $interval := include "flashrl-operator.durationMs" .scrape.interval | atoi }}
{{- $timeout := include "flashrl-operator.durationMs" .scrape.scrapeTimeout | atoi }}
{{- if gt $timeout $interval }}
{{- fail (printf "%s.scrapeTimeout (%s) must not be longer than %s.interval (%s): Prometheus refuses a scrape that outlasts its interval" .what .scrape.scrapeTimeout .what .scrape.interval) }}
{{- end }}
{{- end }}
