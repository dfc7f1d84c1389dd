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
Where the database comes from: bundled (the chart's StatefulSet), cloudnativepg (a CloudNativePG
Cluster the chart declares) or external (secrets.databaseDsn / the existing Secret's database-dsn).
*/}}
{{- define "hindsight.databaseMode" -}}
{{- if and .Values.postgresql.enabled .Values.cloudnativepg.enabled }}
{{- fail "postgresql.enabled and cloudnativepg.enabled are alternatives: set postgresql.enabled=false for a CloudNativePG Cluster" }}
{{- end }}
{{- if and .Values.secrets.databaseReplicaDsns (or .Values.postgresql.enabled .Values.cloudnativepg.enabled) }}
{{- fail "secrets.databaseReplicaDsns is for an external database (the bundled one has no replicas; CloudNativePG's standbys are wired by the chart)" }}
{{- end }}
{{- if .Values.cloudnativepg.enabled }}cloudnativepg{{ else if .Values.postgresql.enabled }}bundled{{ else }}external{{ end }}
{{- end }}

{{/*
The CloudNativePG Cluster's name: its Services are NAME-rw / NAME-ro, its credentials NAME-app. The
operator takes a DNS-1035 label of at most 50 characters (a release name may start with a digit).
*/}}
{{- define "hindsight.cnpgClusterName" -}}
{{- $name := .Values.cloudnativepg.clusterName | default (printf "%s-db" (include "hindsight.fullname" . | trunc 47 | trimSuffix "-")) }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "the CloudNativePG Cluster's name %q must start with a letter (a DNS-1035 label): set cloudnativepg.clusterName" $name) }}
{{- end }}
{{- $name }}
{{- end }}

{{/*
The migrations Job runs before the release's own resources exist (pre-install) when the database is
external, so it reads a hook Secret of its own. With the bundled PostgreSQL or a CloudNativePG Cluster
it runs after install (post-install: the database must exist first), the bundled one's with the
release's Secret, the Cluster's with the operator's.
*/}}
{{- define "hindsight.migrationsHooks" -}}
{{- if eq (include "hindsight.databaseMode" .) "external" }}pre-install,pre-upgrade{{ else }}post-install,pre-upgrade{{ end }}
{{- end }}

{{- define "hindsight.migrationsSecretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else if ne (include "hindsight.databaseMode" .) "external" }}
{{- include "hindsight.fullname" . }}
{{- else }}
{{- printf "%s-migrations" (include "hindsight.fullname" .) }}
{{- end }}
{{- end }}

{{/* The external DSN, required when no bundled database and no existing Secret provide one. */}}
{{- define "hindsight.externalDsn" -}}
{{- required "secrets.databaseDsn is required when postgresql.enabled and cloudnativepg.enabled are false and secrets.existingSecret is empty (postgresql://USER:PASSWORD@HOST:5432/DB)" .Values.secrets.databaseDsn }}
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

{{/*
The database settings every process that talks to PostgreSQL needs: include with (dict "ctx" $
"secretName" NAME "reads" BOOL). reads: the replica DSNs too (the memory servers; the migrations only
write). A CloudNativePG Cluster's URIs are put together by Kubernetes ($(VAR) expansion) from its
<name>-app Secret, whose generated password is alphanumeric (no percent-encoding needed in a URI).
*/}}
{{- define "hindsight.databaseEnv" -}}
{{- $mode := include "hindsight.databaseMode" .ctx }}
{{- if eq $mode "cloudnativepg" }}
{{- $cnpg := .ctx.Values.cloudnativepg }}
{{- $cluster := include "hindsight.cnpgClusterName" .ctx }}
{{- $credentials := "$(DATABASE_USERNAME):$(DATABASE_PASSWORD)" -}}
- name: DATABASE_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $cluster }}-app
      key: username
- name: DATABASE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $cluster }}-app
      key: password
- name: HINDSIGHT_DATABASE__DSN
  value: {{ printf "postgresql://%s@%s-rw:5432/%s" $credentials $cluster $cnpg.database | quote }}
{{- if and .reads $cnpg.readFromReplicas (gt (int $cnpg.instances) 1) }}
- name: HINDSIGHT_DATABASE__REPLICA_DSNS
  value: {{ list (printf "postgresql://%s@%s-ro:5432/%s" $credentials $cluster $cnpg.database) | toJson | quote }}
{{- end }}
{{- else -}}
- name: HINDSIGHT_DATABASE__DSN
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: database-dsn
{{- if and .reads (eq $mode "external") }}
- name: HINDSIGHT_DATABASE__REPLICA_DSNS
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: database-replica-dsns
      optional: true
{{- end }}
{{- end }}
{{- end }}

{{/* The TLS secret (tls.enabled): the one named, or the one cert-manager writes. */}}
{{- define "hindsight.tlsSecretName" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "hindsight.fullname" .)) }}
{{- end }}

{{- define "hindsight.tlsDir" -}}/etc/hindsight-tls{{- end }}

{{/*
How a client of the servers (the MCP gateway, the console: PREFIX its settings' prefix) speaks TLS to
them. Include with (dict "ctx" $ "prefix" "HINDSIGHT_MCP__").
*/}}
{{- define "hindsight.targetsTlsEnv" -}}
{{- if .ctx.Values.tls.enabled }}
- name: {{ .prefix }}TARGETS_TLS
  value: "true"
- name: {{ .prefix }}TARGETS_CA_FILE
  value: {{ include "hindsight.tlsDir" . }}/ca.crt
{{- if .ctx.Values.tls.clientAuth }}
- name: {{ .prefix }}TARGETS_CERT_FILE
  value: {{ include "hindsight.tlsDir" . }}/tls.crt
- name: {{ .prefix }}TARGETS_KEY_FILE
  value: {{ include "hindsight.tlsDir" . }}/tls.key
{{- end }}
{{- end }}
{{- end }}

{{/* The TLS secret as a pod volume, and its mount (tls.enabled). Include with the root context. */}}
{{- define "hindsight.tlsVolume" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "hindsight.tlsSecretName" . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "hindsight.tlsMount" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: {{ include "hindsight.tlsDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/*
A server probe: the gRPC health service of SERVICE on the server's port, natively when it is plaintext,
else through the image's healthcheck over TLS (Kubernetes' gRPC probe speaks no TLS). Include with
(dict "ctx" $ "service" NAME).
*/}}
{{- define "hindsight.serverHealthProbe" -}}
{{- if .ctx.Values.tls.enabled }}
exec:
  command: ["hindsight-healthcheck", "grpcs", "localhost:{{ .ctx.Values.server.port }}", {{ .service | quote }}]
{{- else }}
grpc:
  port: {{ .ctx.Values.server.port }}
  service: {{ .service | quote }}
{{- end }}
{{- end }}
