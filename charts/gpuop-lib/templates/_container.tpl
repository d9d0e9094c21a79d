{{/* Env every agent gets: its node name from the downward API and the log level. */}}
{{- define "gpuop.commonEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: GPUOP_LOG_LEVEL
  value: {{ .Values.logLevel | default "info" | quote }}
{{- end -}}

{{/* Liveness and readiness against the shared probe server (gpuop_common.probes). Takes the port. */}}
{{- define "gpuop.probes" -}}
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
