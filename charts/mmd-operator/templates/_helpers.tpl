{{/* Names, labels and the operator's rules, shared by the templates. */}}

{{- define "mmd-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name alone when it already says mmd-operator. */}}
{{- define "mmd-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mmd-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mmd-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mmd-operator.labels" -}}
{{ include "mmd-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: mmd-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "mmd-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "mmd-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Exactly what the operator does in a namespace it manages, and nothing more; docs/operations.md says why
each verb, and a cluster test compares that table with `kubectl auth can-i --list`. `get` only where
the operator reads one object by name. Secrets: `create` alone (a group's SSH keys; it reads none).
pods/status: only the Ready condition of a serving pod whose node has gone silent (lostNodeSeconds).
*/}}
{{- define "mmd-operator.rules" -}}
- apiGroups: [serving.multimodal.dev]
  resources: [multimodaldeployments]
  verbs: [get, list, watch]
- apiGroups: [serving.multimodal.dev]
  resources: [multimodaldeployments/status]
  verbs: [patch]
# get: a shared build or download Job, read before its owners change and when its template differs.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch, create, patch]
# get: a source claim the spec names (does it exist?), and a shared engine-cache claim before its
# owners change.
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# While a Job or the serving workload lacks pods: which quota refuses them, and by how much.
- apiGroups: [""]
  resources: [resourcequotas]
  verbs: [list]
# The tail of a running build or download pod's log: the progress line its program prints.
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
{{- if .Values.lostNodeSeconds }}
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
{{- end }}
# The SSH keys of a replica across pods, a Secret the operator owns: one create (AlreadyExists: it is
# there). RBAC cannot narrow a create to a name; the writes policy holds it to that Secret's shape.
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
# GPUs asked for by claim (spec.gpus.resourceClaim): the template the pods claim their devices from.
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates]
  verbs: [list, watch, create, patch, delete]
# A replica across pods (a group of a LeaderWorkerSet, whose controller the cluster installs).
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [list, watch, create, patch, delete]
# list, by label: the template a LeaderWorkerSet ran at its last Ready revision, to undo one that cannot
# start (the ReplicaSet above is a Deployment's).
- apiGroups: [apps]
  resources: [controllerrevisions]
  verbs: [list]
# create: the operator's Events. list, by pod: the kubelet's FailedMount Events of a Job pod waiting for
# the token Secret it mounts (the operator reads no Secret).
- apiGroups: [""]
  resources: [events]
  verbs: [create, list]
{{- end -}}
