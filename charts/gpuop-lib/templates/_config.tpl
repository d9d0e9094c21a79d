{{/*
The service's settings ConfigMap: config.yaml holds .Values.config (the same keys as the service's
section of DeviceConfig.spec). Agents mount it and reload on change; under the operator, the
operator also writes per-DeviceConfig keys into it.
*/}}
{{- define "gpuop.configMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "gpuop.configMapName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "gpuop.labels" . | nindent 4 }}
data:
  config.yaml: |
    {{- toYaml (.Values.config | default dict) | nindent 4 }}
{{- end -}}

{{- define "gpuop.serviceAccount" -}}
{{- if .Values.serviceAccount.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "gpuop.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "gpuop.labels" . | nindent 4 }}
automountServiceAccountToken: true
{{- end }}
{{- end -}}
