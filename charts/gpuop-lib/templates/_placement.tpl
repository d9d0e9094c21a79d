{{/*
Which nodes run the agent. Under the operator (operatorManaged=true) the DaemonSet selects the
deploy label the operator sets node by node in rollout order. Standalone it selects any node that
carries one of presenceLabels (NFD's PCI vendor labels by default), plus any extra nodeSelector.
Takes a dict: {"ctx": ., "service": "<service>"}.
*/}}
{{- define "gpuop.nodePlacement" -}}
{{- $v := .ctx.Values -}}
{{- if $v.operatorManaged }}
nodeSelector:
  gpuop.dev/deploy.{{ .service }}: "true"
  {{- with $v.nodeSelector }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- else }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.presenceLabels }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      {{- range $v.presenceLabels }}
        - matchExpressions:
            - key: {{ . }}
              operator: In
              values: ["true"]
      {{- end }}
{{- end }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}
