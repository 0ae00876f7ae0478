"""JSON schemas for the custom resources Sluice ships, written from the CRDs.

kubernetes-validate bundles the built-in kinds only. These cover the fields our
manifests use (and reject unknown ones where the real CRD does), so a typo in a
ServiceMonitor, PodMonitor or ScaledObject fails here rather than at apply time.
They are a subset of the Prometheus Operator (monitoring.coreos.com/v1) and
KEDA (keda.sh/v1alpha1) CRDs, not a copy of them.
"""

from __future__ import annotations

from typing import Any

_META = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}},
}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
    r"(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string", "pattern": "^/"},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "scheme": {"enum": ["http", "https"]},
        "honorLabels": {"type": "boolean"},
    },
}


def _resource(api: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": api},
            "kind": {"const": kind},
            "metadata": _META,
            "spec": spec,
        },
    }


SERVICE_MONITOR = _resource(
    "monitoring.coreos.com/v1",
    "ServiceMonitor",
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["selector", "endpoints"],
        "properties": {
            "selector": _LABEL_SELECTOR,
            "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            "namespaceSelector": {"type": "object"},
        },
    },
)

POD_MONITOR = _resource(
    "monitoring.coreos.com/v1",
    "PodMonitor",
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["selector"],
        "properties": {
            "selector": _LABEL_SELECTOR,
            "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            "namespaceSelector": {"type": "object"},
        },
    },
)

_HPA_POLICY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type", "value", "periodSeconds"],
    "properties": {
        "type": {"enum": ["Pods", "Percent"]},
        "value": {"type": "integer", "minimum": 1},
        "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800},
    },
}
_HPA_RULES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
        "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
        "policies": {"type": "array", "items": _HPA_POLICY},
    },
}

SCALED_OBJECT = _resource(
    "keda.sh/v1alpha1",
    "ScaledObject",
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["scaleTargetRef", "triggers"],
        "properties": {
            "scaleTargetRef": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "kind": {"type": "string"},
                    "apiVersion": {"type": "string"},
                },
            },
            "minReplicaCount": {"type": "integer", "minimum": 0},
            "maxReplicaCount": {"type": "integer", "minimum": 1},
            "idleReplicaCount": {"type": "integer", "minimum": 0},
            "pollingInterval": {"type": "integer", "minimum": 1},
            "cooldownPeriod": {"type": "integer", "minimum": 0},
            "advanced": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "restoreToOriginalReplicaCount": {"type": "boolean"},
                    "horizontalPodAutoscalerConfig": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "behavior": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {"scaleUp": _HPA_RULES, "scaleDown": _HPA_RULES},
                            },
                        },
                    },
                },
            },
            "triggers": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["type", "metadata"],
                    "properties": {
                        "type": {"type": "string"},
                        "name": {"type": "string"},
                        "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                        # KEDA trigger metadata values are strings, never numbers.
                        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                        "authenticationRef": {"type": "object"},
                    },
                },
            },
        },
    },
)

PROMETHEUS_TRIGGER_METADATA = {"serverAddress", "query", "threshold"}

BY_KIND: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PodMonitor"): POD_MONITOR,
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
}
