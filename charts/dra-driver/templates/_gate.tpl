{{/*
"true" when the cluster serves resource.k8s.io/v1 (discovery at install time; Kubernetes >= 1.34
for `helm template`, whose built-in API list predates it). Every object of this chart is rendered
only then, so the umbrella chart installs cleanly on older clusters and simply has no DRA driver.
*/}}
{{- define "gpuop-dra.served" -}}
{{- if or (.Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass") (semverCompare ">=1.34.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpuop-dra.driver" -}}gpu.gpuop.dev{{- end -}}
