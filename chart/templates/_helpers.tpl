{{/*
Names. Namespaced objects are named `<fullname>-<component>`; cluster-scoped objects (RBAC, webhook
configurations) are named `<namespace>.<fullname>-<component>`, so two releases never share a name,
even releases with the same name in different namespaces.
*/}}

{{- define "nodewright.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every name: at most 40 characters, so `-operator-metrics` etc. still fit 63. */}}
{{- define "nodewright.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nodewright.clusterName" -}}
{{- printf "%s.%s" .Release.Namespace (include "nodewright.fullname" .) -}}
{{- end -}}

{{- define "nodewright.operatorName" -}}{{ include "nodewright.fullname" . }}-operator{{- end -}}
{{- define "nodewright.webhookName" -}}{{ include "nodewright.fullname" . }}-webhook{{- end -}}
{{- define "nodewright.defaultsName" -}}{{ include "nodewright.fullname" . }}-defaults{{- end -}}
{{- define "nodewright.caSecretName" -}}{{ include "nodewright.fullname" . }}-webhook-ca{{- end -}}

{{/* The Secret the webhook serves from. */}}
{{- define "nodewright.tlsSecretName" -}}
{{- if eq .Values.certs.mode "provided" -}}
{{- .Values.certs.provided.secretName -}}
{{- else -}}
{{- include "nodewright.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/* Secrets of the release namespace no package may read through env[].valueFrom.secretKeyRef
(package pods run there): the webhook's CA and serving certificate, the pull secrets the chart
names, and admission.protectedSecrets. Comma-separated, for WEBHOOK_PROTECTED_SECRETS. */}}
{{- define "nodewright.protectedSecrets" -}}
{{- $names := list (include "nodewright.caSecretName" .) (include "nodewright.tlsSecretName" .) -}}
{{- with .Values.operator.packageImagePullSecret }}{{ $names = append $names . }}{{ end -}}
{{- range .Values.imagePullSecrets }}{{ $names = append $names . }}{{ end -}}
{{- range .Values.admission.protectedSecrets }}{{ $names = append $names . }}{{ end -}}
{{- $names | compact | uniq | join "," -}}
{{- end -}}

{{/* Both webhook configurations share this name (they are different kinds). */}}
{{- define "nodewright.webhookConfigName" -}}{{ include "nodewright.clusterName" . }}-webhook{{- end -}}

{{- define "nodewright.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "nodewright.labels" -}}
helm.sh/chart: {{ include "nodewright.chart" . }}
app.kubernetes.io/name: {{ include "nodewright.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nodewright
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "operator"). */}}
{{- define "nodewright.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodewright.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "nodewright.componentLabels" -}}
{{ include "nodewright.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference: (dict "image" .Values.operator.image "ctx" $). A digest pins it. */}}
{{- define "nodewright.image" -}}
{{- $tag := default .ctx.Chart.AppVersion .image.tag -}}
{{- if .image.digest -}}
{{- if .image.tag -}}
{{- printf "%s:%s@%s" .image.repository .image.tag .image.digest -}}
{{- else -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- end -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
The agent image (AGENT_IMAGE): operator.agentImage when set, else operator.agent.image. The built-in
digest belongs to one image; refused with any other, so changing the tag alone cannot pin a
different image to the wrong digest (the pull would fail on every node).
*/}}
{{- define "nodewright.agentImage" -}}
{{- if .Values.operator.agentImage -}}
{{- .Values.operator.agentImage -}}
{{- else -}}
{{- $i := .Values.operator.agent.image -}}
{{- $pinned := "sha256:dedf73c19455444e2663671368eaf3fcd657ea1417f0d8738c6133ed738b9c52" -}}
{{- if and (eq $i.digest $pinned) (or (ne $i.repository "nvcr.io/nvidia/skyhook/agent") (ne (toString $i.tag) "v6.4.1")) -}}
{{- fail (printf "operator.agent.image: digest %s is the one of nvcr.io/nvidia/skyhook/agent:v6.4.1, not of %s:%s; set operator.agent.image.digest to the digest of that image, or to \"\" to run it by tag" $pinned $i.repository (toString $i.tag)) -}}
{{- end -}}
{{- if not (or $i.tag $i.digest) -}}
{{- fail "operator.agent.image: set a tag (the agent version) or a digest" -}}
{{- end -}}
{{- if and $i.tag $i.digest -}}
{{- printf "%s:%s@%s" $i.repository (toString $i.tag) $i.digest -}}
{{- else if $i.digest -}}
{{- printf "%s@%s" $i.repository $i.digest -}}
{{- else -}}
{{- printf "%s:%s" $i.repository (toString $i.tag) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The namespace of package and interrupt Jobs, their pods and ConfigMaps (PACKAGE_NAMESPACE):
`<namespace>-<fullname>-packages`, or `<namespace>-packages` when the two are the same (`helm install
nodewright -n nodewright`), so two releases never share one. */}}
{{- define "nodewright.packageNamespace" -}}
{{- $full := include "nodewright.fullname" . -}}
{{- $default := ternary (printf "%s-packages" $full) (printf "%s-%s-packages" .Release.Namespace $full) (eq $full .Release.Namespace) -}}
{{- .Values.packageNamespace.name | default $default -}}
{{- end -}}

{{/* The ServiceAccount of package and interrupt pods (PACKAGE_SERVICE_ACCOUNT); empty = default. */}}
{{- define "nodewright.packageServiceAccount" -}}
{{- if .Values.operator.packageServiceAccount.create -}}
{{ include "nodewright.fullname" . }}-packages
{{- else -}}
{{- .Values.operator.packageServiceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The host of webhook.url (for the serving certificate's names). */}}
{{- define "nodewright.urlHost" -}}
{{- if .Values.webhook.url -}}
{{- (urlParse .Values.webhook.url).hostname -}}
{{- end -}}
{{- end -}}

{{/* DNS names of the webhook Service. */}}
{{- define "nodewright.serviceNames" -}}
{{- $svc := include "nodewright.webhookName" . -}}
{{- $ns := .Release.Namespace -}}
- {{ $svc }}
- {{ $svc }}.{{ $ns }}
- {{ $svc }}.{{ $ns }}.svc
- {{ $svc }}.{{ $ns }}.svc.{{ .Values.certs.selfManaged.clusterDomain }}
{{- end -}}

{{/* clientConfig of one webhook: (dict "ctx" $ "path" "/mutate-nodewright"). */}}
{{- define "nodewright.clientConfig" -}}
{{- $v := .ctx.Values -}}
{{- if $v.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" $v.webhook.url) .path | quote }}
{{- else }}
service:
  name: {{ include "nodewright.webhookName" .ctx }}
  namespace: {{ .ctx.Release.Namespace }}
  path: {{ .path | quote }}
  port: {{ $v.webhook.service.port }}
{{- end }}
{{- if eq $v.certs.mode "provided" }}
caBundle: {{ $v.certs.provided.caBundle | quote }}
{{- end }}
{{- end -}}

{{/* Settings every webhook entry shares. */}}
{{- define "nodewright.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
matchPolicy: Equivalent
failurePolicy: {{ .Values.webhook.failurePolicy }}
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{- end -}}

{{/* Annotations of both webhook configurations. */}}
{{- define "nodewright.webhookConfigAnnotations" -}}
{{- if eq .Values.certs.mode "cert-manager" }}
annotations:
  # cert-manager's cainjector keeps caBundle equal to the serving certificate's CA.
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "nodewright.tlsSecretName" . }}
{{- end }}
{{- end -}}

{{/* Checksum of the shared defaults, so a change rolls both Deployments. */}}
{{- define "nodewright.defaultsChecksum" -}}
{{- toJson .Values.defaults | sha256sum -}}
{{- end -}}

{{/* Rules of one webhook: (dict "resource" "nodewrights" "operations" "\"CREATE\""). */}}
{{- define "nodewright.rules" -}}
rules:
  - apiGroups: ["nodewright.nvidia.com"]
    apiVersions: ["v1alpha1"]
    resources: [{{ .resource | quote }}]
    operations: [{{ .operations }}]
    scope: Cluster
{{- end -}}

{{/* The operator's resources: operator.resources when set, else the sizing formula
(values.yaml `sizing`, docs/sizing.md). */}}
{{- define "nodewright.operatorResources" -}}
{{- if .Values.operator.resources -}}
{{- toYaml .Values.operator.resources -}}
{{- else -}}
{{- $s := .Values.sizing -}}
{{- $nodes := float64 $s.expectedNodes -}}
{{- $packages := float64 $s.expectedPackages -}}
{{- $memRequest := ceil (addf $s.memoryBaseMiB (divf (mulf $nodes $packages $s.memoryPerNodePackageKiB) 1024)) | int -}}
{{- $memLimit := ceil (mulf $memRequest $s.memoryLimitFactor) | int -}}
{{- $cpuRequest := ceil (addf $s.cpuBaseMillicores (mulf $nodes $s.cpuPerNodeMillicores)) | int -}}
{{- $cpuLimit := max (int $s.cpuLimitMinMillicores) (ceil (mulf $cpuRequest $s.cpuLimitFactor) | int) -}}
requests:
  cpu: {{ printf "%dm" $cpuRequest }}
  memory: {{ printf "%dMi" $memRequest }}
limits:
  cpu: {{ printf "%dm" $cpuLimit }}
  memory: {{ printf "%dMi" $memLimit }}
{{- end -}}
{{- end -}}
