{{/* Names, labels and the values several templates derive the same way. */}}

{{- define "hindsight.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name; components append -triton, -mcp, ... so it keeps room for them. */}}
{{- define "hindsight.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 48 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "hindsight.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hindsight.labels" -}}
helm.sh/chart: {{ include "hindsight.chart" . }}
app.kubernetes.io/name: {{ include "hindsight.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hindsight
{{- end }}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "server"). */}}
{{- define "hindsight.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hindsight.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "hindsight.componentLabels" -}}
{{ include "hindsight.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "hindsight.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hindsight.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* image: include with (dict "ctx" $ "image" .Values.triton.image); empty fields fall back to .Values.image. */}}
{{- define "hindsight.image" -}}
{{- $repository := .image.repository | default .ctx.Values.image.repository }}
{{- $tag := .image.tag | default .ctx.Values.image.tag | default .ctx.Chart.AppVersion }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}

{{/* The Secret holding the DSN, the MCP tokens and the optional LLM key. */}}
{{- define "hindsight.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "hindsight.fullname" .) }}
{{- end }}

{{/*
The migrations Job runs before the release's own resources exist (pre-install) when the database is
external, so it reads a hook Secret of its own. With the bundled PostgreSQL it runs after install
(post-install: the database must exist first) and can read the release's Secret.
*/}}
{{- define "hindsight.migrationsHooks" -}}
{{- if .Values.postgresql.enabled }}post-install,pre-upgrade{{ else }}pre-install,pre-upgrade{{ end }}
{{- end }}

{{- define "hindsight.migrationsSecretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else if .Values.postgresql.enabled }}
{{- include "hindsight.fullname" . }}
{{- else }}
{{- printf "%s-migrations" (include "hindsight.fullname" .) }}
{{- end }}
{{- end }}

{{/* The external DSN, required when no bundled database and no existing Secret provide one. */}}
{{- define "hindsight.externalDsn" -}}
{{- required "secrets.databaseDsn is required when postgresql.enabled is false and secrets.existingSecret is empty (postgresql://USER:PASSWORD@HOST:5432/DB)" .Values.secrets.databaseDsn }}
{{- end }}

{{/* Triton's gRPC address as the memory servers see it. */}}
{{- define "hindsight.inferenceUrl" -}}
{{- if .Values.inference.url }}
{{- .Values.inference.url }}
{{- else if .Values.triton.enabled }}
{{- printf "%s-triton:%d" (include "hindsight.fullname" .) (int .Values.triton.service.grpcPort) }}
{{- end }}
{{- end }}

{{/*
The memory servers as the MCP gateway sees them: the headless Service through gRPC's DNS resolver, so
the gateway's round_robin policy spreads calls over every ready pod (a ClusterIP would pin its one
HTTP/2 connection, and so every call, to one pod).
*/}}
{{- define "hindsight.serverTargets" -}}
{{- if .Values.mcp.targets }}
{{- .Values.mcp.targets }}
{{- else }}
{{- printf "dns:///%s-headless.%s.svc.%s:%d" (include "hindsight.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.server.port) }}
{{- end }}
{{- end }}

{{/* Environment shared by every hindsight process: telemetry. Include with (dict "ctx" $ "service" NAME). */}}
{{- define "hindsight.telemetryEnv" -}}
- name: OTEL_SERVICE_NAME
  value: {{ .service | quote }}
{{- with .ctx.Values.telemetry.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $.ctx.Values.telemetry.otlpProtocol | quote }}
- name: HINDSIGHT_TELEMETRY__SAMPLE_RATIO
  value: {{ $.ctx.Values.telemetry.sampleRatio | quote }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ printf "service.namespace=%s,k8s.namespace.name=%s" .ctx.Release.Name .ctx.Release.Namespace | quote }}
{{- end }}

{{/* The database settings every process that talks to PostgreSQL needs (servers, migrations). */}}
{{- define "hindsight.databaseEnv" -}}
- name: HINDSIGHT_DATABASE__DSN
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: database-dsn
{{- end }}
