#!/bin/sh
# Grafana's entrypoint in the compose stack: provision where ragmon's alerts go and ragmon's
# dashboards, then start Grafana (the command given as arguments, /run.sh in the image).
#
# Dashboards: copied from RAGMON_DASHBOARDS_SRC (the repository's grafana/dashboards, mounted
# read-only) to RAGMON_DASHBOARDS_DIR (where the dashboard provider reads them), with
# RAGMON_EXPLORER_URL (the event explorer's public URL: ragmon's API as browsers reach it) as
# the default of their `explorer` variable, the base of every panel's data link. The alert
# rules likewise (RAGMON_ALERTS_SRC to the alerting directory): each alert links to the explorer
# and to its dashboard panel.
#
# Each channel is on when its variable is set (in deploy/.env):
#   ALERT_SLACK_WEBHOOK_URL       a Slack incoming webhook
#   ALERT_PAGERDUTY_ROUTING_KEY   a PagerDuty Events v2 integration (routing) key
#   ALERT_WEBHOOK_URL             any URL that takes Grafana's webhook JSON (POST)
# All alerts go to every channel that is on; PagerDuty gets the alert's severity label
# (warning or critical), so the service's urgency rules can page for critical ones only.
#
# The file written holds `$ALERT_...` references, never the values: Grafana reads them from its
# environment when it provisions the file. A channel whose variable is empty is left out
# (Grafana refuses to start with a Slack, PagerDuty or webhook contact point that has no
# URL or key); with none set, no file is written and Grafana keeps its default policy.
set -eu

dir="${GF_PATHS_PROVISIONING:-/etc/grafana/provisioning}/alerting"
file="$dir/ragmon-notifications.yml"
receivers=""

if [ -n "${ALERT_SLACK_WEBHOOK_URL:-}" ]; then
    receivers="$receivers
      - uid: ragmon-slack
        type: slack
        settings:
          url: \$ALERT_SLACK_WEBHOOK_URL"
fi
if [ -n "${ALERT_PAGERDUTY_ROUTING_KEY:-}" ]; then
    receivers="$receivers
      - uid: ragmon-pagerduty
        type: pagerduty
        settings:
          integrationKey: \$ALERT_PAGERDUTY_ROUTING_KEY
          severity: '{{ or .CommonLabels.severity \"critical\" }}'
          class: ragmon
          component: '{{ .CommonLabels.app }}'"
fi
if [ -n "${ALERT_WEBHOOK_URL:-}" ]; then
    receivers="$receivers
      - uid: ragmon-webhook
        type: webhook
        settings:
          url: \$ALERT_WEBHOOK_URL
          httpMethod: POST"
fi

if [ -z "$receivers" ]; then
    rm -f "$file"
    echo "ragmon: no ALERT_SLACK_WEBHOOK_URL, ALERT_PAGERDUTY_ROUTING_KEY or ALERT_WEBHOOK_URL: alerts show in Grafana only" >&2
else
    mkdir -p "$dir"
    cat > "$file" <<EOF
# Written by grafana/contact-points.sh at Grafana's start: do not edit.
apiVersion: 1
contactPoints:
  - orgId: 1
    name: ragmon
    receivers:$receivers
policies:
  - orgId: 1
    receiver: ragmon
    group_by: [alertname, app, index, retriever, segment]
    group_wait: 30s
    group_interval: 5m
    repeat_interval: 4h
EOF
    echo "ragmon: alert notifications provisioned in $file" >&2
fi

src="${RAGMON_DASHBOARDS_SRC:-/etc/grafana/ragmon/dashboards}"
dst="${RAGMON_DASHBOARDS_DIR:-/var/lib/grafana/dashboards}"
explorer="${RAGMON_EXPLORER_URL:-http://localhost:8000}"
explorer="${explorer%/}"
# escaped for sed's replacement: \, & and the | delimiter
escaped=$(printf '%s' "$explorer" | sed 's/[\\&|]/\\&/g')
mkdir -p "$dst"
for f in "$src"/*.json; do
    [ -f "$f" ] || continue
    sed "s|\"http://localhost:8000\"|\"$escaped\"|g" "$f" > "$dst/$(basename "$f")"
done
echo "ragmon: dashboards in $dst link to the explorer at $explorer" >&2

# Alert rules: copied from RAGMON_ALERTS_SRC into the alerting directory with the explorer's
# URL (and Grafana's own, GF_SERVER_ROOT_URL, when set) as the base of each alert's links.
alerts="${RAGMON_ALERTS_SRC:-/etc/grafana/ragmon/ragmon-alerts.yml}"
grafana="${GF_SERVER_ROOT_URL:-http://localhost:3000}"
grafana_escaped=$(printf '%s' "${grafana%/}" | sed 's/[\\&|]/\\&/g')
if [ -f "$alerts" ]; then
    sed -e "s|http://localhost:8000/ui|$escaped/ui|g" \
        -e "s|http://localhost:3000/d/|$grafana_escaped/d/|g" "$alerts" > "$dir/ragmon-alerts.yml"
    echo "ragmon: alerts link to the explorer at $explorer and to Grafana at $grafana" >&2
fi

exec "$@"
