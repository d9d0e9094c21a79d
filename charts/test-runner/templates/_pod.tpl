{{/*
The pod spec the agent DaemonSet, the manual Job and the CronJob share. Takes a dict:
{"ctx": ., "args": [...], "probes": bool, "nodeName": "<node>" (Jobs only)}.
*/}}
{{- define "test-runner.podSpec" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
serviceAccountName: {{ include "gpuop.serviceAccountName" $ctx }}
{{- with (include "gpuop.imagePullSecrets" $ctx | trim) }}
{{ . }}
{{- end }}
{{- if .nodeName }}
nodeName: {{ .nodeName }}
restartPolicy: Never
{{- else }}
{{- with (include "gpuop.nodePlacement" (dict "ctx" $ctx "service" "test-runner") | trim) }}
{{ . }}
{{- end }}
{{- end }}
{{- with $v.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- if $v.runAsRoot }}
# Root: RVS and AGFHC open /dev/kfd and /dev/dri and read PCI config space (values.yaml: runAsRoot).
securityContext:
  runAsUser: 0
  seccompProfile:
    type: RuntimeDefault
{{- else }}
{{ include "gpuop.nonRootPodSecurity" $ctx }}
{{- end }}
# A run stops within the tool's 5 s SIGTERM->SIGKILL grace; the agent records it as Aborted.
terminationGracePeriodSeconds: 30
containers:
  - name: test-runner
    image: {{ include "gpuop.image" $ctx }}
    imagePullPolicy: {{ $v.image.pullPolicy }}
    args:
      {{- toYaml .args | nindent 6 }}
    env:
      {{- include "gpuop.commonEnv" $ctx | nindent 6 }}
      # Vendor recipes run in a pod of the tools image (config.toolsImage) in this namespace.
      - name: GPUOP_TOOLS_NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
      {{- $secrets := concat ($v.global.imagePullSecrets | default list) ($v.imagePullSecrets | default list) | uniq }}
      {{- with $secrets }}
      - name: GPUOP_TOOLS_IMAGE_PULL_SECRETS
        value: {{ join "," . | quote }}
      {{- end }}
      {{- with $v.runtimeClassName }}
      - name: GPUOP_TOOLS_RUNTIME_CLASS
        value: {{ . | quote }}
      {{- end }}
      - name: NVIDIA_VISIBLE_DEVICES
        value: all
      - name: NVIDIA_DRIVER_CAPABILITIES
        value: utility
    {{- if .probes }}
    ports:
      - name: probes
        containerPort: 8084
        protocol: TCP
    {{- include "gpuop.probes" 8084 | nindent 4 }}
    {{- end }}
    {{- if $v.privileged }}
    # Privileged: device nodes outside a GPU allocation can only be opened so (values.yaml: privileged).
    securityContext:
      privileged: true
      readOnlyRootFilesystem: true
    {{- else }}
    {{- include "gpuop.restrictedContainerSecurity" $ctx | nindent 4 }}
    {{- end }}
    {{- with $v.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    volumeMounts:
      - name: sys
        mountPath: /sys
        readOnly: true
      - name: dev
        mountPath: /dev
      - name: logs
        mountPath: {{ $v.logsHostPath }}
      - name: config
        mountPath: /etc/gpuop
        readOnly: true
      {{- if .probes }}
      - name: pod-resources
        mountPath: {{ $v.podResourcesHostPath }}
        readOnly: true
      {{- end }}
volumes:
  - name: sys
    hostPath:
      path: /sys
      type: Directory
  - name: dev
    hostPath:
      path: /dev
      type: Directory
  - name: logs
    hostPath:
      path: {{ $v.logsHostPath }}
      type: DirectoryOrCreate
  - name: config
    configMap:
      name: {{ include "gpuop.configMapName" $ctx }}
  {{- if .probes }}
  # The agent asks the kubelet which containers hold which GPU (held unhealthy GPUs wait).
  - name: pod-resources
    hostPath:
      path: {{ $v.podResourcesHostPath }}
      type: DirectoryOrCreate
  {{- end }}
{{- end -}}

{{/* Flags every mode passes: the config file and the run files. */}}
{{- define "test-runner.commonArgs" -}}
- --config-file=/etc/gpuop/config.yaml
- --logs-dir={{ .Values.logsHostPath }}
- --keep-runs={{ .Values.keepRuns }}
{{- end -}}
