{{/* Names and labels shared by every manifest. */}}
{{- define "tcli.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tcli.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tcli.labels" -}}
{{ include "tcli.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret the server's environment comes from ("" when there is none). */}}
{{- define "tcli.secretName" -}}
{{- if .Values.secret.existingSecret -}}
{{- .Values.secret.existingSecret -}}
{{- else if or .Values.secret.id .Values.secret.key -}}
{{- printf "%s-cloud-credentials" (include "tcli.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* What --model-store names: git-sync's checkout when it is on, else image.modelRepositoryPath. */}}
{{- define "tcli.modelStore" -}}
{{- if .Values.gitSync.enabled -}}
{{- trimSuffix "/" (printf "/git/current/%s" .Values.gitSync.subPath) -}}
{{- else -}}
{{- .Values.image.modelRepositoryPath -}}
{{- end -}}
{{- end -}}

{{/*
The prometheus-adapter rule that turns the server's counters into the per-pod metric the HPA reads:
queueing time per successful request over the window (Triton's metric names, which tcli exports).
*/}}
{{- define "tcli.adapterRule" -}}
- seriesQuery: 'nv_inference_queue_duration_us{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  name:
    matches: ^nv_inference_queue_duration_us$
    as: {{ .Values.autoscaling.metricName }}
  metricsQuery: >-
    sum(rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[{{ .Values.autoscaling.rateWindow }}])) by (<<.GroupBy>>)
    / clamp_min(sum(rate(nv_inference_request_success{<<.LabelMatchers>>}[{{ .Values.autoscaling.rateWindow }}])) by (<<.GroupBy>>), 1e-9)
{{- end -}}

{{/* A git-sync container (the init checkout or the sidecar): dict root, name, oneTime. */}}
{{- define "tcli.gitSync" -}}
{{- $v := .root.Values.gitSync -}}
- name: {{ .name }}
  image: {{ $v.image | quote }}
  args:
    - {{ printf "--repo=%s" $v.repo | quote }}
    - {{ printf "--ref=%s" $v.ref | quote }}
    - --root=/git
    - --link=current
    {{- if .oneTime }}
    - --one-time
    {{- else }}
    - {{ printf "--period=%s" $v.period | quote }}
    {{- end }}
  {{- with $v.existingSecret }}
  envFrom:
    - secretRef:
        name: {{ . }}
  {{- end }}
  securityContext:
    runAsUser: 65533  # git-sync's own user; fsGroup 1000 lets it write the shared volume
    runAsGroup: 65533
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: [ALL]
  resources:
    requests: {cpu: 10m, memory: 32Mi}
    limits: {memory: 256Mi}
  volumeMounts:
    - {name: models, mountPath: /git}
    - {name: git-sync-tmp, mountPath: /tmp}  # git-sync's HOME
{{- end -}}
