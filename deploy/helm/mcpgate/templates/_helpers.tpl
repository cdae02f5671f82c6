{{/* The chart's name, or nameOverride. */}}
{{- define "mcpgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's resource name: <release>-<name>, or fullnameOverride. */}}
{{- define "mcpgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if eq .Release.Name $name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The chart label: name-version. */}}
{{- define "mcpgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the pods: never change them on upgrade. */}}
{{- define "mcpgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "mcpgate.labels" -}}
helm.sh/chart: {{ include "mcpgate.chart" . }}
{{ include "mcpgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The store config.store names: sqlite unless it says postgres. */}}
{{- define "mcpgate.storeDriver" -}}
{{- $driver := "sqlite" }}
{{- with .Values.config.store }}
{{- $driver = .driver | default "sqlite" }}
{{- end }}
{{- $driver }}
{{- end }}

{{/*
Values the chart refuses to render. SQLite is one process's file: two
replicas would each hold their own keys and audit, and two pods on one
volume would corrupt it. Several replicas need fleet mode.
*/}}
{{- define "mcpgate.checkValues" -}}
{{- if and (ne (include "mcpgate.storeDriver" .) "postgres") (or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1)) }}
{{- fail "replicaCount > 1 or autoscaling.enabled needs config.store.driver: postgres (fleet mode, values-fleet.yaml): the embedded SQLite store serves one replica" }}
{{- end }}
{{- end }}

{{/*
Labels of the helm test pod: the release's, but not the selector's, so the
Service never routes to it and the PodDisruptionBudget never counts it.
*/}}
{{- define "mcpgate.testLabels" -}}
helm.sh/chart: {{ include "mcpgate.chart" . }}
app.kubernetes.io/name: {{ include "mcpgate.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The image reference: repository:tag, the tag defaulting to appVersion. */}}
{{- define "mcpgate.image" -}}
{{- printf "%s:%s" (required "image.repository is required" .Values.image.repository) (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
