{{/* The app name: the chart's, or nameOverride. */}}
{{- define "raygate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Object names: fullnameOverride, else the release name when it contains the app name (`helm install
raygate` names everything raygate, as config/ does), else RELEASE-APP.
*/}}
{{- define "raygate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "raygate.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Every object's labels: config/'s, and Helm's own. */}}
{{- define "raygate.labels" -}}
app.kubernetes.io/name: {{ include "raygate.name" . }}
app.kubernetes.io/part-of: raygate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/* The controller's pods. A Deployment's selector is immutable: never add to it. */}}
{{- define "raygate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "raygate.name" . }}
app.kubernetes.io/component: controller
{{- end }}

{{/* raygate's ServiceAccount; the admission policies exempt exactly this user. */}}
{{- define "raygate.serviceAccountName" -}}
{{ include "raygate.fullname" . }}
{{- end }}

{{- define "raygate.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "raygate.serviceAccountName" . }}
{{- end }}
