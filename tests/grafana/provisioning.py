"""The checks Grafana makes when it provisions alerting files, written out for the tests.

Grafana (11.x) refuses to start when a provisioned alerting file fails them, so they run on
every file the compose stack gives Grafana: the alert rules and the notifications file written
by grafana/contact-points.sh. Sources: pkg/services/provisioning/alerting (rules_types.go,
contact_point_types.go, notification_policy_types.go), the receivers' settings validation in
grafana/alerting, and pkg/services/provisioning/values (environment interpolation).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
NO_DATA_STATES = {"OK", "NoData", "Alerting", "KeepLast"}
EXEC_ERR_STATES = {"OK", "Error", "Alerting", "KeepLast"}
MATCH_OPS = {"=", "!=", "=~", "!~"}
# Settings each receiver type cannot do without (any one of a tuple).
REQUIRED_SETTINGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "slack": (("url", "token"),),
    "pagerduty": (("integrationKey",),),
    "webhook": (("url",),),
}
_ENV = re.compile(r"\$(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Grafana's interpolation of a provisioned value: Go's os.ExpandEnv, `$$` a literal `$`."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1).strip("{}")
        return env.get(name, "")

    return "$".join(_ENV.sub(sub, part) for part in value.split("$$"))


def env_references(value: str) -> set[str]:
    """The environment variables Grafana would substitute in `value`."""
    return {m.group(1).strip("{}") for part in value.split("$$") for m in _ENV.finditer(part)}


def check_files(docs: Mapping[str, dict], env: Mapping[str, str] | None = None) -> list[str]:
    """Every problem Grafana would find in these alerting files, provisioned together with
    `env` as its environment (default: this process's)."""
    env = dict(os.environ if env is None else env)
    errors: list[str] = []
    rule_uids: list[str] = []
    receiver_uids: list[str] = []
    contact_points: set[str] = set()
    policies: list[tuple[str, dict]] = []
    for name, doc in docs.items():
        if doc.get("apiVersion") != 1:
            errors.append(f"{name}: apiVersion must be 1")
        for group in doc.get("groups", []):
            errors += [f"{name}: {e}" for e in _check_group(group, env)]
            rule_uids += [r.get("uid", "") for r in group.get("rules", [])]
        for cp in doc.get("contactPoints", []):
            errors += [f"{name}: {e}" for e in _check_contact_point(cp, env)]
            contact_points.add(interpolate(str(cp.get("name", "")), env).strip())
            receiver_uids += [str(r.get("uid", "")) for r in cp.get("receivers", [])]
        policies += [(name, p) for p in doc.get("policies", [])]
    for kind, uids in (("rule", rule_uids), ("receiver", receiver_uids)):
        dups = {u for u in uids if uids.count(u) > 1}
        if dups:
            errors.append(f"duplicate {kind} uids {sorted(dups)}")
    if len(policies) > 1:
        errors.append("more than one notification policy tree for org 1")
    for name, policy in policies:
        errors += [f"{name}: {e}" for e in _check_route(policy, contact_points, env, root=True)]
    return errors


def _check_group(group: dict, env: Mapping[str, str]) -> list[str]:
    errors = []
    where = f"group {group.get('name')!r}"
    if not group.get("name") or not group.get("folder"):
        errors.append(f"{where}: name and folder are required")
    if not DURATION.match(str(group.get("interval", ""))):
        errors.append(f"{where}: interval {group.get('interval')!r} is not a duration")
    for rule in group.get("rules", []):
        title = rule.get("title")
        if not UID.match(str(rule.get("uid", ""))):
            errors.append(f"{where}: rule {title!r}: uid {rule.get('uid')!r} is not a Grafana uid")
        if not title:
            errors.append(f"{where}: a rule without a title")
        refs = [d.get("refId") for d in rule.get("data", [])]
        if rule.get("condition") not in refs:
            errors.append(f"{where}: {title}: condition is not one of the queries {refs}")
        for query in rule.get("data", []):
            if not query.get("datasourceUid") or not isinstance(query.get("model"), dict):
                errors.append(f"{where}: {title}: query {query.get('refId')} lacks data source")
        if not DURATION.match(str(rule.get("for", "0s"))):
            errors.append(f"{where}: {title}: for {rule.get('for')!r} is not a duration")
        if rule.get("noDataState", "NoData") not in NO_DATA_STATES:
            errors.append(f"{where}: {title}: noDataState {rule.get('noDataState')!r}")
        if rule.get("execErrState", "Error") not in EXEC_ERR_STATES:
            errors.append(f"{where}: {title}: execErrState {rule.get('execErrState')!r}")
        # Grafana substitutes environment variables in these fields (not in annotations nor
        # in the query model): a stray `$` there would silently become an empty string.
        interpolated = [rule.get("uid"), title, rule.get("condition"), rule.get("for")]
        interpolated += [q.get("datasourceUid") for q in rule.get("data", [])]
        interpolated += list((rule.get("labels") or {}).values())
        for value in map(str, filter(None, interpolated)):
            if env_references(value):
                errors.append(f"{where}: {title}: {value!r} would be interpolated by Grafana")
    return errors


def _check_contact_point(cp: dict, env: Mapping[str, str]) -> list[str]:
    name = interpolate(str(cp.get("name", "")), env).strip()
    if not name:
        return ["a contact point without a name"]
    errors = []
    if not cp.get("receivers"):
        errors.append(f"contact point {name!r}: no receivers")
    for r in cp.get("receivers", []):
        uid = interpolate(str(r.get("uid", "")), env).strip()
        kind = interpolate(str(r.get("type", "")), env).strip()
        settings = r.get("settings") or {}
        where = f"contact point {name!r} receiver {uid or '?'}"
        if not UID.match(uid):
            errors.append(f"{where}: uid {uid!r} is not a Grafana uid")
        if kind not in REQUIRED_SETTINGS:
            errors.append(f"{where}: type {kind!r} is not one ragmon provisions")
            continue
        if not settings:
            errors.append(f"{where}: no settings are set")
        for options in REQUIRED_SETTINGS[kind]:
            if not any(interpolate(str(settings.get(o, "")), env).strip() for o in options):
                errors.append(f"{where}: {kind} needs {' or '.join(options)} (empty after env)")
        for key in ("url",):
            value = interpolate(str(settings.get(key, "")), env)
            if value and not re.match(r"^https?://[^\s/]+", value):
                errors.append(f"{where}: {key} is not an http(s) URL after env")
        if kind == "webhook" and settings.get("httpMethod", "POST") not in ("POST", "PUT"):
            errors.append(f"{where}: httpMethod must be POST or PUT")
    return errors


def _check_route(route: dict, receivers: set[str], env: Mapping[str, str], root: bool) -> list[str]:
    errors = []
    receiver = interpolate(str(route.get("receiver", "")), env)
    if root and not receiver:
        errors.append("the root policy needs a receiver")
    if receiver and receiver not in receivers:
        errors.append(f"policy receiver {receiver!r} is not a provisioned contact point")
    if root and (route.get("object_matchers") or route.get("matchers")):
        errors.append("the root policy cannot have matchers")
    for label in route.get("group_by", []):
        if label != "..." and not LABEL_NAME.match(str(label)):
            errors.append(f"group_by {label!r} is not a label name")
    for key in ("group_wait", "group_interval", "repeat_interval"):
        if key in route and not DURATION.match(str(route[key])):
            errors.append(f"{key} {route[key]!r} is not a duration")
    for matcher in route.get("object_matchers", []):
        if len(matcher) != 3 or matcher[1] not in MATCH_OPS or not LABEL_NAME.match(matcher[0]):
            errors.append(f"matcher {matcher!r} is not [label, op, value]")
    for child in route.get("routes", []):
        errors += _check_route(child, receivers, env, root=False)
    return errors
