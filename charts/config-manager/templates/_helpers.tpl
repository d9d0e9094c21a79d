{{/*
"true" when the agent runs host commands through hostExec, so the host's / is mounted at /host:
a driver reload (modprobe) or partition writes through amd-smi (partitionTool auto or amd-smi).
*/}}
{{- define "config-manager.hostMount" -}}
{{- if or .Values.driverReload (ne .Values.partitionTool "sysfs") -}}true{{- end -}}
{{- end -}}

{{/*
The agent's ConfigMap: config.yaml (the `config` values) and shipped-profiles.yaml, the chart's
profiles again. Under the operator config.yaml becomes the DeviceConfig's configManager section;
the operator adds to it the shipped profiles the DeviceConfig does not name (docs/config-manager.md).
*/}}
{{- define "config-manager.configMap" -}}
{{ include "gpuop.configMap" . }}
  shipped-profiles.yaml: |
    {{- toYaml (.Values.config.profiles | default list) | nindent 4 }}
{{- end -}}
