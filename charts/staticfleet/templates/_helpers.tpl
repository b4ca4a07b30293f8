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
The shards the release runs, one Deployment each: "" (one operator for every ConsumerGroup)
without shards, else "default" (the release's own Deployment, owning every group no named shard
owns) and then the named shards.
*/}}
{{- define "staticfleet.shardNames" -}}
{{- if .Values.shards }}
{{- prepend .Values.shards "default" | toJson }}
{{- else }}
{{- list "" | toJson }}
{{- end }}
{{- end }}

{{/*
The Deployment of a shard (dict "root" $ "shard" <name>): the release's full name for the
default shard, "<fullname>-<shard>" for a named one. It names the shard's peering object too.
*/}}
{{- define "staticfleet.shardFullname" -}}
{{- $fullname := include "staticfleet.fullname" .root }}
{{- if or (eq .shard "") (eq .shard "default") }}
{{- $fullname }}
{{- else }}
{{- $name := printf "%s-%s" $fullname .shard }}
{{- if gt (len $name) 63 }}
{{- fail (printf "the Deployment of shard %s would be named %s, longer than 63 characters: shorten the release name, fullnameOverride or the shard name" .shard $name) }}
{{- end }}
{{- $name }}
{{- end }}
{{- end }}

{{/*
The selector labels of a shard's operator pods (dict "root" $ "shard" <name>): the release's for
the default shard (its Deployment's selector, which cannot change, stays as it was before there
were shards); for a named shard, the instance "<release>-<shard>", so that no Deployment's
selector matches another's pods.
*/}}
{{- define "staticfleet.shardSelectorLabels" -}}
{{- if or (eq .shard "") (eq .shard "default") }}
{{- include "staticfleet.selectorLabels" .root }}
{{- else }}
app.kubernetes.io/name: {{ include "staticfleet.name" .root }}
app.kubernetes.io/instance: {{ printf "%s-%s" .root.Release.Name .shard | trunc 63 | trimSuffix "-" }}
{{- end }}
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
all-namespaces mode and the Roles of the watchNamespaces mode): the verbs its code and kopf call,
no more. docs/security.md explains each; tests/unit/chart/test_chart.py holds the same table.
*/}}
{{- define "staticfleet.namespacedRules" -}}
# kopf lists and watches ConsumerGroups (each group's reconcile daemon, the index of Kafka group
# ids) and patches them: its finalizer (a daemon needs one) and its progress annotations.
- apiGroups: ["staticfleet.io"]
  resources: ["consumergroups"]
  verbs: ["list", "watch", "patch"]
# The operator writes each group's status (a merge patch of the status subresource).
- apiGroups: ["staticfleet.io"]
  resources: ["consumergroups/status"]
  verbs: ["patch"]
# The autoscaler (spec.autoscaling) sets spec.replicas through the scale subresource.
- apiGroups: ["staticfleet.io"]
  resources: ["consumergroups/scale"]
  verbs: ["patch"]
# Children name their ConsumerGroup as owner with blockOwnerDeletion; where the
# OwnerReferencesPermissionEnforcement admission plugin is on (OpenShift), setting that needs
# `update` on the owner's finalizers. Nothing calls it otherwise.
- apiGroups: ["staticfleet.io"]
  resources: ["consumergroups/finalizers"]
  verbs: ["update"]
# Member pods: watched (kopf's pod index, by label), created and deleted by the operator itself
# (no StatefulSet), and patched to set a standby's staticfleet.io/activated annotation.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# The group's ConfigMap (config.json), headless Service and PodDisruptionBudget, server-side
# applied (a patch, which needs create when the object is new) and watched (list, watch: by the
# children's labels) so that one someone changes or deletes is applied again; the garbage
# collector deletes them with the group. RBAC cannot narrow list and watch to those labels:
# this reaches every ConfigMap of the namespaces the rule applies to.
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["list", "watch", "create", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "patch"]
# Secrets are read, by name only (never listed or watched): the Kafka credentials a
# ConsumerGroup references in spec.kafka.security (SASL username and password, TLS CA,
# certificate and private key), with which the operator connects to Kafka itself (group and
# offset reads, broker limits). Members get them from the kubelet (secretKeyRef), not from the
# operator. RBAC cannot narrow `get` to the referenced Secrets: this reaches every Secret of the
# namespaces it applies to (all of them without watchNamespaces).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
# Each group's member token Secret `<group>-member-token`: created when missing, never changed
# (no patch, no update: the operator cannot change any Secret), and read back with the `get`
# above. Members require its token on POST /leave, /rejoin and /activate. RBAC cannot narrow
# create to a name, so this too reaches every namespace the rule applies to.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
{{- if .Values.networkPolicy.enabled }}
# Each group's members' NetworkPolicy `<group>-members` (networkPolicy.enabled), server-side
# applied and watched like the ConfigMap; the garbage collector deletes it with the group.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["list", "watch", "create", "patch"]
{{- end }}
# Events about ConsumerGroups (the operator's decisions, kopf's warnings): core/v1, created only.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{/*
Cluster-scoped rules kopf needs in every mode: it watches the CRDs to notice its resource
appearing or going.
*/}}
{{- define "staticfleet.crdRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end }}

{{/*
kopf's peering (peering.enabled): each operator watches its peering object and patches its own
keep-alive into the object's status. Cluster-wide (`clusterkopfpeerings`) in the all-namespaces
mode, else `kopfpeerings` in each watched namespace. The argument is the resource.
*/}}
{{- define "staticfleet.peeringRules" -}}
- apiGroups: ["kopf.dev"]
  resources: [{{ . | quote }}]
  verbs: ["list", "watch", "patch"]
{{- end }}

{{/*
The sources the operator admits to the members' port in the NetworkPolicy it makes beside each
ConsumerGroup (STATICFLEET_MEMBER_INGRESS_FROM, a JSON list of NetworkPolicyPeers): its own pods
(each shard's selector labels, in the release namespace), then networkPolicy.prometheus and
networkPolicy.extraFrom.
*/}}
{{- define "staticfleet.memberIngressFrom" -}}
{{- $root := . }}
{{- $operators := list }}
{{- range $shard := include "staticfleet.shardNames" . | fromJsonArray }}
{{- $operators = append $operators (dict
  "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" $root.Release.Namespace))
  "podSelector" (dict "matchLabels" (include "staticfleet.shardSelectorLabels" (dict "root" $root "shard" $shard) | fromYaml))) }}
{{- end }}
{{- concat $operators (.Values.networkPolicy.prometheus | default (list))
  (.Values.networkPolicy.extraFrom | default (list)) | toJson }}
{{- end }}


{{- /*
The namespaces the operator watches, as a JSON list; `[]` for every namespace (docs/install.md,
"Which namespaces"). watchNamespaces `["*"]`: every namespace. A list of names: those. Empty
(the default): the release's own namespace, except on a `helm upgrade` of a release that
already watches every namespace (earlier charts did when this was empty): its ClusterRoleBinding
`<fullname>`, which only that mode makes, is found (lookup) and the upgrade keeps every
namespace. `helm template` and client-side dry runs do no lookup: they render the default.
*/}}
{{- define "staticfleet.watchedNamespaces" -}}
{{- $ns := .Values.watchNamespaces | default list -}}
{{- if has "*" $ns -}}
[]
{{- else if $ns -}}
{{ toJson $ns }}
{{- else if include "staticfleet.keptClusterWide" . -}}
[]
{{- else -}}
{{ toJson (list .Release.Namespace) }}
{{- end -}}
{{- end -}}

{{- /* "true" when an upgrade keeps an earlier release's every-namespace scope (above). */}}
{{- define "staticfleet.keptClusterWide" -}}
{{- if and .Release.IsUpgrade (not .Values.watchNamespaces) -}}
{{- if lookup "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" "" (include "staticfleet.fullname" .) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
