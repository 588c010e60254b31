"""Environment variables KubeRay v1.7.0 owns in Ray containers: the one list ``spec.env`` is checked against.

KubeRay builds every Ray container's environment itself (``ray-operator/controllers/ray/common/pod.go``
at v1.7.0) and refuses RayClusters whose head container sets some variables
(``ray-operator/controllers/ray/utils/validation.go``). A FlashRLJob's ``spec.env`` lands in those
containers, so a name below either makes KubeRay refuse the RayJob after the FlashRLJob was accepted,
or is silently replaced or shadowed by KubeRay's own value. Both are refused at admission instead
(CEL, and the models for ``flashrl validate`` and the operator).

Names are KubeRay's constants (``ray-operator/controllers/ray/utils/constant.go``). Variables KubeRay
sets only for RayServices (``RAY_timeout_ms_task_wait_for_death_info``, ...) or only in its own
sidecars (autoscaler, history collector, submitter) never reach a FlashRLJob's Ray containers and are
not listed. ``RAY_START_ULIMIT_OPEN_FILES`` is a knob KubeRay reads, not sets, and stays allowed.
"""

from __future__ import annotations

from typing import Final

_REJECTED = "KubeRay refuses the RayCluster"
_APPENDED = "KubeRay appends its own value, which shadows this one"
_IF_ABSENT = "KubeRay sets it and relies on its own value"

#: name -> what KubeRay v1.7.0 does with it, and where (paths under ``ray-operator/controllers/ray/``).
KUBERAY_MANAGED_ENV: Final[dict[str, str]] = {
    # Rejected by validation.go (ValidateRayClusterSpec).
    "RAY_REDIS_ADDRESS": f"{_REJECTED} without GCS fault tolerance (utils/validation.go:158-163)",
    "REDIS_USERNAME": f"{_REJECTED} (utils/validation.go:192-195)",
    "REDIS_PASSWORD": f"{_REJECTED} with GCS fault tolerance, else sets it (utils/validation.go:173; "
    "common/pod.go:164-170)",
    "RAY_enable_autoscaler_v2": f"{_REJECTED} when set to 1/true without autoscaling, and sets it with "
    "autoscaling (utils/validation.go:205-212; common/pod.go:321-343)",
    "RAY_gcs_storage": f"{_REJECTED} with the embedded GCS store, else sets it (utils/validation.go:356; "
    "common/pod.go:181-186)",
    "RAY_gcs_storage_path": f"{_REJECTED} with the embedded GCS store, else sets it "
    "(utils/validation.go:356; common/pod.go:187-192)",
    "RAY_USE_TLS": f"{_REJECTED} with tlsOptions and sets it (utils/validation.go:454; "
    "common/pod.go:546-559)",
    "RAY_TLS_SERVER_CERT": f"{_REJECTED} with tlsOptions and sets it (utils/validation.go:454; "
    "common/pod.go:546-559)",
    "RAY_TLS_SERVER_KEY": f"{_REJECTED} with tlsOptions and sets it (utils/validation.go:454; "
    "common/pod.go:546-559)",
    "RAY_TLS_CA_CERT": f"{_REJECTED} with tlsOptions and sets it (utils/validation.go:454; "
    "common/pod.go:546-559)",
    # Appended unconditionally by setContainerEnvVars (common/pod.go:1207-1343).
    "FQ_RAY_IP": f"{_APPENDED} on workers (common/pod.go:1226-1230)",
    "RAY_IP": f"{_APPENDED} on workers (common/pod.go:1226-1230)",
    "RAY_CLUSTER_NAME": f"{_APPENDED} (common/pod.go:1233-1242)",
    "RAY_CLUSTER_NAMESPACE": f"{_APPENDED} (common/pod.go:1244-1253)",
    "RAY_CLOUD_INSTANCE_ID": f"{_APPENDED} (common/pod.go:1255-1264)",
    "RAY_NODE_TYPE_NAME": f"{_APPENDED} (common/pod.go:1266-1275)",
    "KUBERAY_GEN_RAY_START_CMD": f"{_APPENDED}: the generated `ray start` command (common/pod.go:1277-1280)",
    "RAY_USAGE_STATS_EXTRA_TAGS": f"{_APPENDED} on the head (common/pod.go:1313-1319)",
    # Set by KubeRay unless present: a user value would replace what KubeRay's own wiring expects.
    "RAY_PORT": f"{_IF_ABSENT}: the GCS port (common/pod.go:1282-1285)",
    "RAY_ADDRESS": f"{_IF_ABSENT}: the head's address (common/pod.go:1304-1308)",
    "RAY_USAGE_STATS_KUBERAY_IN_USE": f"{_IF_ABSENT} (common/pod.go:1309-1312)",
    "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE": f"{_IF_ABSENT} (common/pod.go:1321-1324)",
    "RAY_external_storage_namespace": f"{_IF_ABSENT} with GCS fault tolerance (common/pod.go:127-130)",
    "RAY_gcs_rpc_server_reconnect_timeout_s": f"{_IF_ABSENT} on workers with GCS fault tolerance "
    "(common/pod.go:94-102)",
    "RAY_AUTH_MODE": f"{_IF_ABSENT} with token authentication (common/pod.go:388-393)",
    "RAY_ENABLE_K8S_TOKEN_AUTH": f"{_IF_ABSENT} with Kubernetes token authentication (common/pod.go:396-401)",
    "RAY_AUTH_TOKEN": f"{_IF_ABSENT} from the cluster's token Secret (common/pod.go:414-424)",
    "RAY_enable_ray_event": f"{_IF_ABSENT} with the history server (common/pod.go:1326-1341)",
    "RAY_enable_core_worker_ray_event_to_aggregator": f"{_IF_ABSENT} with the history server "
    "(common/pod.go:1326-1341)",
    "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": f"{_IF_ABSENT} with the history server "
    "(common/pod.go:1326-1341)",
    "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES": f"{_IF_ABSENT} with the history server "
    "(common/pod.go:1326-1341)",
    "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES": f"{_IF_ABSENT} with the "
    "history server (common/pod.go:1326-1341)",
}

#: The names alone, in a fixed order (CEL list, messages).
KUBERAY_MANAGED_ENV_NAMES: Final[tuple[str, ...]] = tuple(KUBERAY_MANAGED_ENV)
