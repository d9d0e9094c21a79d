{{/* <registry>/<repository>:<tag>; global.imageRegistry wins over image.registry; tag defaults to appVersion. */}}
{{- define "gpuop.image" -}}
{{- $global := .Values.global | default dict -}}
{{- $registry := coalesce $global.imageRegistry .Values.image.registry "" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .Values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "gpuop.imagePullSecrets" -}}
{{- $global := .Values.global | default dict -}}
{{- $secrets := concat ($global.imagePullSecrets | default list) (.Values.imagePullSecrets | default list) | uniq -}}
{{- if $secrets }}
imagePullSecrets:
{{- range $secrets }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}
