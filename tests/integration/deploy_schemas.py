"""JSON Schemas of the custom resources in deploy/ (KServe, KEDA, Prometheus Operator), vendored:
kubernetes-validate carries only Kubernetes' own kinds. Each lists the fields of the CRD's spec that
the upstream API defines (KServe v0.15 ServingRuntimeSpec / PredictorSpec, KEDA v2.17 ScaledObjectSpec,
prometheus-operator v0.8x ServiceMonitorSpec) with additionalProperties false, so a misspelt field
fails here instead of being silently dropped by the API server's pruning. Embedded Kubernetes types
(Container, Volume, HPA behavior, LabelSelector) are validated by the test with kubernetes-validate."""

from __future__ import annotations

STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
STR_MAP = {"type": "object", "additionalProperties": STR}
OBJ = {"type": "object"}
LIST = {"type": "array"}


def _resource(api_version: str, kind: str, spec: dict) -> dict:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": {"type": "object", "required": ["name"]},
            "spec": spec,
        },
        "additionalProperties": False,
    }


CLUSTER_SERVING_RUNTIME = _resource(
    "serving.kserve.io/v1alpha1",
    "ClusterServingRuntime",
    {
        "type": "object",
        "required": ["containers", "supportedModelFormats"],
        "additionalProperties": False,
        "properties": {
            "annotations": STR_MAP,
            "labels": STR_MAP,
            "supportedModelFormats": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {"name": STR, "version": STR, "autoSelect": BOOL, "priority": INT},
                },
            },
            "protocolVersions": {"type": "array", "items": {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]}},
            "multiModel": BOOL,
            "disabled": BOOL,
            "containers": {"type": "array", "minItems": 1},
            "volumes": LIST,
            "nodeSelector": STR_MAP,
            "affinity": OBJ,
            "tolerations": LIST,
            "imagePullSecrets": LIST,
            "replicas": INT,
            "grpcEndpoint": STR,
            "grpcDataEndpoint": STR,
            "httpDataEndpoint": STR,
            "builtInAdapter": OBJ,
            "storageHelper": OBJ,
            "hostIPC": BOOL,
            "workerSpec": OBJ,
        },
    },
)

_MODEL = {
    "type": "object",
    "required": ["modelFormat"],
    "properties": {  # a model spec also embeds a Container (checked by the test)
        "modelFormat": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {"name": STR, "version": STR},
        },
        "runtime": STR,
        "storageUri": STR,
        "protocolVersion": {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]},
    },
}

INFERENCE_SERVICE = _resource(
    "serving.kserve.io/v1beta1",
    "InferenceService",
    {
        "type": "object",
        "required": ["predictor"],
        "additionalProperties": False,
        "properties": {
            "predictor": {
                "type": "object",
                "properties": {  # a predictor also embeds a PodSpec
                    "model": _MODEL,
                    "minReplicas": {"type": "integer", "minimum": 0},
                    "maxReplicas": {"type": "integer", "minimum": 0},
                    "scaleTarget": INT,
                    "scaleMetric": {"enum": ["cpu", "memory", "concurrency", "rps"]},
                    "canaryTrafficPercent": {"type": "integer", "minimum": 0, "maximum": 100},
                    "containerConcurrency": INT,
                    "timeout": INT,
                },
            },
            "transformer": OBJ,
            "explainer": OBJ,
        },
    },
)

_TRIGGER = {
    "type": "object",
    "required": ["type", "metadata"],
    "additionalProperties": False,
    "properties": {
        "type": STR,
        "name": STR,
        "metadata": STR_MAP,  # KEDA reads every trigger setting as a string
        "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
        "authenticationRef": OBJ,
        "useCachedMetrics": BOOL,
    },
}

SCALED_OBJECT = _resource(
    "keda.sh/v1alpha1",
    "ScaledObject",
    {
        "type": "object",
        "required": ["scaleTargetRef", "triggers"],
        "additionalProperties": False,
        "properties": {
            "scaleTargetRef": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {"name": STR, "kind": STR, "apiVersion": STR, "envSourceContainerName": STR},
            },
            "pollingInterval": INT,
            "cooldownPeriod": INT,
            "initialCooldownPeriod": INT,
            "idleReplicaCount": INT,
            "minReplicaCount": INT,
            "maxReplicaCount": INT,
            "fallback": OBJ,
            "advanced": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "restoreToOriginalReplicaCount": BOOL,
                    "horizontalPodAutoscalerConfig": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"name": STR, "behavior": OBJ},
                    },
                    "scalingModifiers": OBJ,
                },
            },
            "triggers": {"type": "array", "minItems": 1, "items": _TRIGGER},
        },
    },
)

PROMETHEUS_TRIGGER = {  # KEDA's prometheus scaler: what it requires of a trigger's metadata
    "type": "object",
    "required": ["serverAddress", "query", "threshold"],
    "properties": {
        "threshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
        "activationThreshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
    },
}

SERVICE_MONITOR = _resource(
    "monitoring.coreos.com/v1",
    "ServiceMonitor",
    {
        "type": "object",
        "required": ["selector", "endpoints"],
        "properties": {
            "selector": OBJ,
            "namespaceSelector": OBJ,
            "jobLabel": STR,
            "endpoints": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "port": STR,
                        "targetPort": {"type": ["string", "integer"]},
                        "path": STR,
                        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                        "interval": {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h))+$"},
                        "scrapeTimeout": {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h))+$"},
                    },
                },
            },
        },
    },
)

HTTP_SCALED_OBJECT = _resource(  # KEDA HTTP add-on v0.10 HTTPScaledObjectSpec
    "http.keda.sh/v1alpha1",
    "HTTPScaledObject",
    {
        "type": "object",
        "required": ["scaleTargetRef"],
        "additionalProperties": False,
        "properties": {
            "hosts": {"type": "array", "items": STR},
            "pathPrefixes": {"type": "array", "items": STR},
            "scaleTargetRef": {
                "type": "object",
                "required": ["name", "service", "port"],
                "additionalProperties": False,
                "properties": {
                    "name": STR,
                    "kind": STR,
                    "apiVersion": STR,
                    "service": STR,
                    "port": INT,
                    "portName": STR,
                },
            },
            "replicas": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"min": {"type": "integer", "minimum": 0}, "max": INT},
            },
            "scaledownPeriod": INT,
            "initialCooldownPeriod": INT,
            "targetPendingRequests": INT,
            "scalingMetric": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "concurrency": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"targetValue": INT},
                    },
                    "requestRate": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"targetValue": INT, "granularity": STR, "window": STR},
                    },
                },
            },
            "timeouts": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"conditionWait": STR, "responseHeader": STR},
            },
            "coldStartTimeoutFailoverRef": OBJ,
        },
    },
)

CUSTOM = {
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): CLUSTER_SERVING_RUNTIME,
    ("serving.kserve.io/v1beta1", "InferenceService"): INFERENCE_SERVICE,
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("http.keda.sh/v1alpha1", "HTTPScaledObject"): HTTP_SCALED_OBJECT,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
}
