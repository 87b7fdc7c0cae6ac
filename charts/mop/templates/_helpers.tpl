{{/*
The priority as two digits. Fails, naming the value and the range, unless it is one or two
digits or an integer 0..99: the same rule and message as rota's own parser. (The schema only
checks the type: its own message would not say the range.)
*/}}
{{- define "mop.priority" -}}
{{- $value := .Values.mop.priority -}}
{{- $text := toString $value -}}
{{- if not (regexMatch "^[0-9]{1,2}$" $text) -}}
{{- $shown := ternary (quote $text) $text (kindIs "string" $value) -}}
{{- fail (printf "mop.priority: invalid priority %s: expected 00..99 (two digits, or an integer 0..99; lower is more important)" $shown) -}}
{{- end -}}
{{- printf "%02d" (atoi $text) -}}
{{- end }}

{{/* The procedure's name: mop.name, or the release name. */}}
{{- define "mop.name" -}}
{{- .Values.mop.name | default .Release.Name -}}
{{- end }}
