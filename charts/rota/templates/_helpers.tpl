{{/* The namespace of the agents, their Leases and ConfigMaps. */}}
{{- define "rota.namespace" -}}
{{- .Values.namespace.name -}}
{{- end }}

{{- define "rota.fullname" -}}
{{- printf "%s-agent" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* The ValidatingAdmissionPolicy (and its binding) that scopes each agent to its node. */}}
{{- define "rota.authorityPolicy" -}}
{{- printf "%s-node-scoped" (include "rota.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* The scheduler's Deployment, ServiceAccount and RBAC objects. */}}
{{- define "rota.schedulerName" -}}
{{- printf "%s-scheduler" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* The leader Lease of the schedulers, in rota's namespace (rota_scheduler::LEADER_LEASE). */}}
{{- define "rota.schedulerLease" -}}
rota-scheduler
{{- end }}

{{- define "rota.schedulerSelectorLabels" -}}
app.kubernetes.io/name: rota
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "rota.schedulerLabels" -}}
{{ include "rota.schedulerSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The FleetLock server's Deployment, ServiceAccount, Service, RBAC objects and policy. */}}
{{- define "rota.fleetlockName" -}}
{{- printf "%s-fleetlock" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* The label (value "true") of the Nodes that are FleetLock hosts
(rota_fleetlock_kube::HOST_LABEL): their Zincati asks the FleetLock server, and they run no
agent. */}}
{{- define "rota.fleetlockHostLabel" -}}
rota.dev/fleetlock
{{- end }}

{{- define "rota.fleetlockSelectorLabels" -}}
app.kubernetes.io/name: rota
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: fleetlock
{{- end }}

{{- define "rota.fleetlockLabels" -}}
{{ include "rota.fleetlockSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "rota.selectorLabels" -}}
app.kubernetes.io/name: rota
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "rota.labels" -}}
{{ include "rota.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
Fails unless every host file the agent watches or writes lies under one of hostMounts: the
agent would otherwise wait for a sentinel it can never see.
*/}}
{{- define "rota.checkHostPaths" -}}
{{- $agent := .Values.agent -}}
{{- $paths := concat $agent.rebootSentinels (list $agent.maintenanceSentinel $agent.maintenanceInProgress) -}}
{{- range $path := $paths -}}
{{- $covered := false -}}
{{- range $mount := $.Values.hostMounts -}}
{{- if hasPrefix (printf "%s/" (trimSuffix "/" $mount)) $path -}}
{{- $covered = true -}}
{{- end -}}
{{- end -}}
{{- if not $covered -}}
{{- fail (printf "agent: host path %s is not under any of hostMounts %v; add its directory to hostMounts" $path $.Values.hostMounts) -}}
{{- end -}}
{{- end -}}
{{- end }}
