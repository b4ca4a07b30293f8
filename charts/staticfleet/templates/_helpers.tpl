{{/*
The chart name, or nameOverride.
*/}}
{{- define "staticfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's resources: fullnameOverride, or "<release>-<name>" unless the
release name already contains the chart name. Truncated to 63 characters (DNS label).
*/}}
{{- define "staticfleet.fullname" -}}
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

{{/*
"<chart>-<version>" for the helm.sh/chart label.
*/}}
{{- define "staticfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every resource of the release carries.
*/}}
{{- define "staticfleet.labels" -}}
helm.sh/chart: {{ include "staticfleet.chart" . }}
{{ include "staticfleet.selectorLabels" . }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: staticfleet
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The immutable subset of the labels, used in selectors.
*/}}
{{- define "staticfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "staticfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The operator's ServiceAccount name.
*/}}
{{- define "staticfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "staticfleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image reference.
*/}}
{{- define "staticfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Rules the operator needs inside every namespace it watches (shared by the ClusterRole of the
all-namespaces mode and the Roles of the watchNamespaces mode).
*/}}
{{- define "staticfleet.namespacedRules" -}}
- apiGroups: ["staticfleet.io"]
  resources: ["consumergroups"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["staticfleet.io"]
  resources: ["consumergroups/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Only to check that the Secrets a ConsumerGroup references exist; never list or watch.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
Cluster-scoped rules kopf needs in every mode: it scans the CRDs to find its resources.
*/}}
{{- define "staticfleet.crdRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end }}
