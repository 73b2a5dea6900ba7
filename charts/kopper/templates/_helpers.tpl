{{- define "kopper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kopper.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "kopper.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "kopper.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kopper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kopper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kopper.labels" -}}
{{ include "kopper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kopper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kopper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* `--replicate-kinds`: each entry of replication.extraKinds as apiVersion/Kind, comma-separated. */}}
{{- define "kopper.replicateKinds" -}}
{{- $kinds := list -}}
{{- range . -}}
{{- $kinds = append $kinds (printf "%s/%s" .apiVersion .kind) -}}
{{- end -}}
{{- join "," $kinds -}}
{{- end -}}

{{/* The API group of an apiVersion: "" for the core group's "v1". */}}
{{- define "kopper.apiGroup" -}}
{{- if contains "/" . -}}
{{- index (splitList "/" .) 0 -}}
{{- end -}}
{{- end -}}
