{{/* Env every agent gets: its node name from the downward API and the log level. */}}
{{- define "gpuop.commonEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: GPUOP_LOG_LEVEL
  value: {{ .Values.logLevel | default "info" | quote }}
{{- end -}}

{{/* Startup, liveness and readiness against the shared probe server (gpuop_common.probes). Takes the
port. The startup probe gives a slow start on a busy node 60 s (2 s x 30) before liveness, and its
30 s budget, apply: an agent still importing is not a crash loop. */}}
{{- define "gpuop.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: {{ . }}
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ . }}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ . }}
  periodSeconds: 5
{{- end -}}

{{/* Pod-level security context for agents that need no root: the distroless nonroot uid. */}}
{{- define "gpuop.nonRootPodSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "gpuop.restrictedContainerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}
