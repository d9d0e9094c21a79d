{{/*
"true" when the agent runs host commands through hostExec, so the host's / is mounted at /host:
a driver reload (modprobe) or partition writes through amd-smi (partitionTool auto or amd-smi).
*/}}
{{- define "config-manager.hostMount" -}}
{{- if or .Values.driverReload (ne .Values.partitionTool "sysfs") -}}true{{- end -}}
{{- end -}}
