{{/* The release's full name: the release's name, or "<release>-atelier" when it does not say atelier. */}}
{{- define "atelier.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "atelier.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "atelier.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "atelier.serviceAccountName" -}}
{{- default (include "atelier.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "atelier.workshopsNamespace" -}}
{{- default .Release.Namespace .Values.workshops.namespace -}}
{{- end -}}

{{/*
The prerequisite: the agent-sandbox controller and its CRDs, v1.0 or newer in the v1 line (the
v1beta1 API of agents.x-k8s.io and extensions.agents.x-k8s.io; v1alpha1 alone is too old). Helm
reads what the cluster serves (install, upgrade) or what --api-versions says (template).
*/}}
{{- define "atelier.checkPrerequisites" -}}
{{- if .Values.checkPrerequisites -}}
{{- $missing := list -}}
{{- range (list "agents.x-k8s.io/v1beta1/Sandbox" "extensions.agents.x-k8s.io/v1beta1/SandboxTemplate" "extensions.agents.x-k8s.io/v1beta1/SandboxClaim" "extensions.agents.x-k8s.io/v1beta1/SandboxWarmPool") -}}
{{- if not ($.Capabilities.APIVersions.Has .) -}}
{{- $missing = append $missing . -}}
{{- end -}}
{{- end -}}
{{- if $missing -}}
{{- fail (printf "\n\nthe cluster does not serve %s: install the agent-sandbox controller and its CRDs first (kubernetes-sigs/agent-sandbox v1.0.0 or newer, below v2: the v1beta1 API, with its extensions), see docs/kubernetes.md \"Installing with Helm\". Rendering without a cluster: pass --api-versions for each of them, or set checkPrerequisites=false." (join ", " $missing)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
