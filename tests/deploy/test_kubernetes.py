"""deploy/kubernetes against the Kubernetes schemas (offline), the CLI, the settings and itself.

There is no cluster here: built-in kinds are validated with the JSON schemas that the
`kubernetes-validate` package ships, the three custom resources with the minimal schemas in
tests/deploy/schemas, and the kustomization is both loaded by hand (every listed file exists
and parses) and, when kubectl is installed, built with `kubectl kustomize`.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ragmon.settings import Settings, env_variables
from tests.deploy.conftest import (
    DOCKERFILE,
    K8S,
    PROMETHEUS_DIR,
    SCHEMAS,
    load_yaml,
    load_yaml_all,
    parse_ragmon,
    which_or_skip,
    yaml,
)

KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")  # oldest supported (CronJob timeZone is GA) and recent
CUSTOM_KINDS = {
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def load_kustomization(directory: Path) -> list[dict[str, Any]]:
    """The objects a kustomization produces, resolved by hand (no transformers but namespace)."""
    kustomization = load_yaml(directory / "kustomization.yaml")
    assert kustomization["kind"] == "Kustomization"
    objects: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        assert path.exists(), f"{directory.name}/kustomization.yaml lists missing {entry}"
        if path.is_dir():
            assert (path / "kustomization.yaml").is_file(), f"{entry}/ has no kustomization.yaml"
            objects.extend(load_kustomization(path))
        else:
            docs = load_yaml_all(path)
            assert docs, f"{entry} holds no object"
            objects.extend(docs)
    for gen in kustomization.get("configMapGenerator", []):
        data: dict[str, str] = {}
        for env_file in gen.get("envs", []):
            assert (directory / env_file).is_file(), f"configMapGenerator file {env_file} missing"
            data.update(read_env_file(directory / env_file))
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": gen["name"]},
                "data": data,
            }
        )
    namespace = kustomization.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] != "Namespace":
                obj["metadata"]["namespace"] = namespace
    return objects


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    return load_yaml(K8S / "kustomization.yaml")


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return load_kustomization(K8S)


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    pytest.fail(f"no {kind}/{name} in deploy/kubernetes")


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in {"Deployment", "StatefulSet", "CronJob"}]


def ragmon_containers(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{o['kind']}/{o['metadata']['name']}", c)
        for o in workloads(objects)
        for c in pod_spec(o)["containers"]
        if c["image"] == "ragmon"
    ]


def config_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    return find(objects, "ConfigMap", "ragmon-config")["data"]


# --- the kustomization itself ---------------------------------------------------------------


def test_every_listed_resource_exists_and_parses(objects):
    kinds = {o["kind"] for o in objects}
    assert kinds >= {
        "Deployment",
        "Service",
        "CronJob",
        "ConfigMap",
        "StatefulSet",
        "ScaledObject",
        "ServiceMonitor",
        "PrometheusRule",
    }
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), "duplicate objects"


@pytest.mark.process
def test_kubectl_kustomize_builds_the_same_objects(objects):
    kubectl = shutil.which("kubectl")
    kustomize = shutil.which("kustomize")
    if kubectl is None and kustomize is None:
        pytest.skip("neither kubectl nor kustomize installed; hand-loaded kustomization only")
    cmd = [kustomize, "build", str(K8S)] if kustomize else [kubectl, "kustomize", str(K8S)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    built = [d for d in yaml.safe_load_all(out.stdout) if d]
    built_names = {
        (d["kind"], d["metadata"]["name"].rsplit("-", 1)[0] if d["kind"] == "ConfigMap" else "")
        for d in built
    }
    mine = {(o["kind"], "ragmon" if o["kind"] == "ConfigMap" else "") for o in objects}
    assert {k for k, _ in built_names} == {k for k, _ in mine}
    assert len(built) == len(objects)
    for d in built:
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == "ragmon", d["metadata"]["name"]
        for c in pod_spec(d)["containers"] if d["kind"] in {"Deployment", "CronJob"} else []:
            assert c["image"] != "ragmon", "the images: transformer must rewrite the image"
        if d["kind"] in {"Deployment", "CronJob"}:
            for c in pod_spec(d)["containers"]:
                for ref in c.get("envFrom", []):
                    if "configMapRef" in ref:
                        # kustomize rewrote the reference to the hashed ConfigMap name.
                        assert ref["configMapRef"]["name"].startswith("ragmon-config-")


# --- schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_builtin_kinds_are_valid_against_the_kubernetes_schemas(objects, version):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    checked = 0
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            continue
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} (k8s {version}): {exc}")
        checked += 1
    assert checked >= 9


def test_secret_example_is_valid_and_names_real_settings():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    (secret,) = load_yaml_all(K8S / "secret.example.yaml")
    kv.validate(secret, KUBERNETES_VERSIONS[0], strict=True)
    unknown = set(secret["stringData"]) - set(env_variables())
    assert not unknown, f"secret keys ragmon does not read: {unknown}"
    assert "RAGMON_API_KEYS" in secret["stringData"]
    # Placeholders stay out of `kubectl apply -k`: the Secret is created by the user.
    assert "secret.example.yaml" not in load_yaml(K8S / "kustomization.yaml")["resources"]


@pytest.mark.parametrize("api_kind", sorted(CUSTOM_KINDS), ids=lambda k: k[1])
def test_custom_resources_have_their_required_fields(objects, api_kind):
    jsonschema = pytest.importorskip("jsonschema")
    api_version, kind = api_kind
    schema_file = SCHEMAS / f"{api_version.replace('/', '_')}_{kind}.json"
    validator = jsonschema.Draft7Validator(json.loads(schema_file.read_text()))
    found = [o for o in objects if (o["apiVersion"], o["kind"]) == api_kind]
    assert found, f"no {kind} in deploy/kubernetes"
    for obj in found:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
        assert not errors, f"{kind}/{obj['metadata']['name']}: " + "; ".join(errors)


# --- commands, settings, wiring -------------------------------------------------------------


@pytest.mark.process
def test_every_container_command_is_accepted_by_the_real_cli(objects):
    containers = ragmon_containers(objects)
    assert len(containers) >= 3
    for where, c in containers:
        argv = c.get("args", [])
        if c.get("command") == ["/bin/sh", "-c"]:
            argv = expand_shell(argv[0])
        parse_ragmon(argv, where)


def expand_shell(script: str) -> list[str]:
    """Run the container's shell line with `ragmon` replaced by a printer: the real expansion."""
    assert script.startswith("exec ragmon "), script
    sh = which_or_skip("sh")
    printer = "exec printf '%s\\n' ragmon " + script.removeprefix("exec ragmon ")
    out = subprocess.run([sh, "-c", printer], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_config_and_secret_names_are_real_settings_and_values_parse(objects):
    data = config_env(objects)
    unknown = set(data) - set(env_variables())
    assert not unknown, f"config.env names ragmon does not read: {sorted(unknown)}"
    settings = Settings.from_env(data, dotenv=None)
    assert settings.redis_url == "redis://ragmon-redis:6379/0"
    for where, c in ragmon_containers(objects):
        refs = c.get("envFrom", [])
        assert refs[0] == {"configMapRef": {"name": "ragmon-config"}}, where
        assert refs[-1] == {"secretRef": {"name": "ragmon-secrets"}}, f"{where}: secret last wins"
        for var in c.get("env", []):
            assert var["name"] in env_variables(), f"{where}: env {var['name']}"


def test_api_probes_ports_and_service(objects):
    api = find(objects, "Deployment", "ragmon-api")
    assert api["spec"]["replicas"] == 2
    (c,) = pod_spec(api)["containers"]
    args = parse_ragmon(c["args"], "api")
    assert args.command == "serve" and args.host == "0.0.0.0"
    assert not args.allow_insecure_public, "in Kubernetes the API requires RAGMON_API_KEYS"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == args.port
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    svc = find(objects, "Service", "ragmon-api")
    pod_labels = api["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert api["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert {p["name"] for p in svc["spec"]["ports"]} == {"http"}
    pdb = find(objects, "PodDisruptionBudget", "ragmon-api")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_prometheus_scrapes_exactly_one_ragmon_serve(objects):
    """Each `ragmon serve` exports the fleet-wide aggregates: scraping the 2 API replicas would
    make every sum() count each event twice, so one 1-replica metrics pod is the target."""
    monitor = find(objects, "ServiceMonitor", "ragmon")
    selector = monitor["spec"]["selector"]["matchLabels"].items()
    selected = [
        o for o in objects if o["kind"] == "Service" and selector <= o["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == ["ragmon-metrics"]
    (svc,) = selected
    pods = [
        o
        for o in objects
        if o["kind"] == "Deployment"
        and svc["spec"]["selector"].items() <= o["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert len(pods) == 1 and pods[0]["spec"]["replicas"] == 1
    (c,) = pod_spec(pods[0])["containers"]
    args = parse_ragmon(c["args"], "metrics")
    assert args.command == "serve"
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["http"] == args.port
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    # The job label comes from the Service label named by jobLabel; the rules use job="ragmon".
    job = svc["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    assert job == "ragmon"
    api_svc = find(objects, "Service", "ragmon-api")
    assert not selector <= api_svc["metadata"]["labels"].items(), "API replicas must not be scraped"


def test_keda_scales_workers_on_the_events_waiting(objects):
    from ragmon.core.catalog import BY_NAME

    worker = find(objects, "Deployment", "ragmon-worker")
    (c,) = pod_spec(worker)["containers"]
    args = parse_ragmon(c["args"], "worker")
    assert args.command == "worker" and not args.with_scheduler and not args.burst
    scaled = find(objects, "ScaledObject", "ragmon-worker")
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == 'max(ragmon_queue_depth{job="ragmon"})'
    assert "ragmon_queue_depth" in BY_NAME  # the gauge the API exports
    assert trigger["metadata"]["serverAddress"].startswith("http")
    assert float(trigger["metadata"]["threshold"]) > 0
    assert scaled["spec"]["minReplicaCount"] >= 1
    assert scaled["spec"]["maxReplicaCount"] > scaled["spec"]["minReplicaCount"]
    assert pod_spec(worker)["terminationGracePeriodSeconds"] >= 60, "RQ warm shutdown needs time"


def test_redis_statefulset_persists_and_matches_redis_url(objects):
    sts = find(objects, "StatefulSet", "ragmon-redis")
    (c,) = pod_spec(sts)["containers"]
    args = c["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--dir") + 1] == c["volumeMounts"][0]["mountPath"]
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    svc = find(objects, "Service", sts["spec"]["serviceName"])
    url = Settings.from_env(config_env(objects), dotenv=None).redis_url
    assert url == f"redis://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}/0"


@pytest.mark.process
def test_weekly_report_cronjob(objects):
    cron = find(objects, "CronJob", "ragmon-weekly-report")
    assert cron["spec"]["schedule"].split()[-1] in {"1", "MON", "mon"}, "weekly, on Mondays"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    (c,) = pod_spec(cron)["containers"]
    argv = expand_shell(c["args"][0])
    args = parse_ragmon(argv, "report CronJob")
    assert args.command == "report" and args.days == 7
    assert len(args.end) == 10 and args.end[4] == "-", f"--end {args.end!r} is not YYYY-MM-DD"
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert any(args.out.startswith(m + "/") for m in mounts), "report written outside a volume"
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in pod_spec(cron)["volumes"]
        if "persistentVolumeClaim" in v
    }
    for claim in claims:
        find(objects, "PersistentVolumeClaim", claim)


def test_pods_run_as_the_images_non_root_user_with_resources(objects):
    user = next(
        line.split()[1].split(":")[0]
        for line in DOCKERFILE.read_text().splitlines()
        if line.startswith("USER ")
    )
    for obj in workloads(objects):
        spec = pod_spec(obj)
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec.get("automountServiceAccountToken") is False, where
        for c in spec["containers"]:
            if c["image"] == "ragmon":
                assert str(spec["securityContext"]["runAsUser"]) == user, where
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, where
            requests = c["resources"]["requests"]
            assert {"cpu", "memory"} <= requests.keys(), f"{where}: resource requests"
            assert "memory" in c["resources"]["limits"], f"{where}: memory limit"


# --- PrometheusRule == deploy/prometheus/rules ----------------------------------------------


def rule_files() -> list[Path]:
    rules_dir = PROMETHEUS_DIR / "rules"
    files = sorted([*rules_dir.glob("*.yml"), *rules_dir.glob("*.yaml")])
    if not files:
        pytest.skip("deploy/prometheus/rules/ has no rule file yet; PrometheusRule unchecked")
    return files


def test_prometheusrule_is_identical_to_the_rule_files(objects):
    files = rule_files()
    groups = [g for f in files for g in (load_yaml(f) or {}).get("groups", [])]
    rule = find(objects, "PrometheusRule", "ragmon")
    assert rule["spec"]["groups"] == groups, (
        "deploy/kubernetes/prometheusrule.yaml is out of date with deploy/prometheus/rules: "
        "run `python scripts/regenerate.py`"
    )


@pytest.mark.process
def test_promtool_accepts_the_prometheusrule_groups(objects, tmp_path):
    promtool = which_or_skip("promtool")
    rule = find(objects, "PrometheusRule", "ragmon")
    path = tmp_path / "prometheusrule-groups.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    n_rules = sum(len(g["rules"]) for g in rule["spec"]["groups"])
    assert f"{n_rules} rules found" in out.stdout


def test_deploy_files_parse_as_yaml_and_use_no_tabs():
    for path in sorted(K8S.rglob("*.yaml")):
        text = path.read_text()
        assert "\t" not in text, f"{path.relative_to(K8S)} contains a tab"
        assert load_yaml_all(path), path
    # shlex is what a reader would use to read the CronJob's one shell line: it must split.
    shlex.split(
        load_yaml_all(K8S / "report-cronjob.yaml")[0]["spec"]["jobTemplate"]["spec"]["template"][
            "spec"
        ]["containers"][0]["args"][0]
    )


def test_the_api_keeps_a_replica_through_a_drain_and_scales_on_cpu(objects):
    api = find(objects, "Deployment", "ragmon-api")
    selector = api["spec"]["selector"]["matchLabels"]
    pdb = find(objects, "PodDisruptionBudget", "ragmon-api")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["minAvailable"] == 1 < api["spec"]["replicas"]
    hpa = find(objects, "HorizontalPodAutoscaler", "ragmon-api")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "ragmon-api"}  # fmt: skip
    assert hpa["spec"]["minReplicas"] == api["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    resources = pod_spec(api)["containers"][0]["resources"]
    assert resources["requests"]["cpu"]  # utilization is read against the request


def test_a_drain_takes_one_worker_at_a_time(objects):
    worker = find(objects, "Deployment", "ragmon-worker")
    pdb = find(objects, "PodDisruptionBudget", "ragmon-worker")
    assert pdb["spec"]["selector"]["matchLabels"] == worker["spec"]["selector"]["matchLabels"]
    assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1}  # not minAvailable: KEDA runs 1


def test_the_sentinel_values_match_the_redis_url_they_name():
    """The Bitnami chart's values (Sentinel on) and the REDIS_URL their header tells to set: the
    URL parses, names the chart's Sentinel service, port and master set, and leaves a replica
    for RAGMON_WAIT_REPLICAS=1 while one pod is down."""
    from ragmon.core.redis_address import parse_sentinel

    path = K8S / "redis-sentinel-values.yaml"
    values = load_yaml(path)
    url = next(
        line.split("REDIS_URL=", 1)[1].strip()
        for line in path.read_text().splitlines()
        if "REDIS_URL=" in line
    )
    assert Settings.from_env({"REDIS_URL": url}, dotenv=None)
    address = parse_sentinel(url)
    sentinel = values["sentinel"]
    assert sentinel["enabled"] and values["architecture"] == "replication"
    assert address.service == sentinel["masterSet"]
    assert address.sentinels == (("ragmon-redis", 26379),) and address.password
    assert values["auth"] == {"enabled": True, "sentinel": False}  # no password to Sentinels
    assert values["replica"]["replicaCount"] >= 3 and sentinel["quorum"] == 2
    assert "maxmemory-policy noeviction" in values["commonConfiguration"]
