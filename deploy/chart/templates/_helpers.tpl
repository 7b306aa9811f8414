{{/*
Object names. The chart is called kerf, but its objects carry Karpenter's names (name
"karpenter", so a release called "karpenter" yields ServiceAccount, Service and Deployment
"karpenter"): IAM trust policies, ServiceMonitors and dashboards written for upstream keep
matching after the swap.
*/}}
{{- define "kerf.name" -}}
{{- default "karpenter" .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kerf.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "kerf.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kerf.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kerf.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kerf.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kerf.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* metadata.labels and, when set, metadata.annotations of every object. */}}
{{- define "kerf.metadata" -}}
labels:
  {{- include "kerf.labels" . | nindent 2 }}
{{- with .Values.additionalAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "kerf.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kerf.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kerf.image" -}}
{{- $image := .Values.controller.image }}
{{- $ref := printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- if $image.digest }}
{{- printf "%s@%s" $ref $image.digest }}
{{- else }}
{{- $ref }}
{{- end }}
{{- end }}

{{- define "kerf.containerName" -}}
{{- default "controller" .Values.controller.containerName }}
{{- end }}

{{/* The subject every binding grants to: the controller's ServiceAccount. */}}
{{- define "kerf.subjects" -}}
subjects:
  - kind: ServiceAccount
    name: {{ include "kerf.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
A copy of a pod (anti-)affinity term list, a term without a labelSelector getting the
pod's selector labels (so "one replica per node" needs only a topologyKey in values).
Takes (dict "terms" LIST "weighted" BOOL "root" $); prints YAML.
*/}}
{{- define "kerf.selectTerms" -}}
{{- $selector := dict "matchLabels" (include "kerf.selectorLabels" .root | fromYaml) }}
{{- $out := list }}
{{- range .terms }}
{{- if $.weighted }}
{{- $term := deepCopy .podAffinityTerm }}
{{- if not (hasKey $term "labelSelector") }}{{- $_ := set $term "labelSelector" $selector }}{{- end }}
{{- $out = append $out (merge (dict "podAffinityTerm" $term) (deepCopy .)) }}
{{- else }}
{{- $term := deepCopy . }}
{{- if not (hasKey $term "labelSelector") }}{{- $_ := set $term "labelSelector" $selector }}{{- end }}
{{- $out = append $out $term }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* .Values.affinity with the pod's selector filled into label-selector-less pod terms. */}}
{{- define "kerf.affinity" -}}
{{- $affinity := deepCopy .Values.affinity }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- with (get $affinity $kind) }}
{{- $patched := deepCopy . }}
{{- with .requiredDuringSchedulingIgnoredDuringExecution }}
{{- $_ := set $patched "requiredDuringSchedulingIgnoredDuringExecution" (include "kerf.selectTerms" (dict "terms" . "weighted" false "root" $) | fromYamlArray) }}
{{- end }}
{{- with .preferredDuringSchedulingIgnoredDuringExecution }}
{{- $_ := set $patched "preferredDuringSchedulingIgnoredDuringExecution" (include "kerf.selectTerms" (dict "terms" . "weighted" true "root" $) | fromYamlArray) }}
{{- end }}
{{- $_ := set $affinity $kind $patched }}
{{- end }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}
