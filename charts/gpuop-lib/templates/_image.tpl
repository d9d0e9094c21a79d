{{/* <registry>/<repository>:<tag>[@<digest>]; global.imageRegistry wins over image.registry; tag defaults to
appVersion; image.digest, when set, pins the exact image (the runtime pulls by digest, the tag stays for people). */}}
{{- define "gpuop.image" -}}
{{- $global := .Values.global | default dict -}}
{{- $registry := coalesce $global.imageRegistry .Values.image.registry "" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}{{- $tag = printf "%s@%s" $tag .Values.image.digest -}}{{- end -}}
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
