"""Kueue's own manager beside the real control plane (the kwok e2e and ``make dev-cluster``), and the
objects that queue the H20 nodes' GPUs: two ResourceFlavors, a ClusterQueue and a LocalQueue, and the
PriorityClass the queued example's pods name.

Why two flavors in two resource groups: Kueue assigns a flavor to each resource a pod set requests
(one flavor per resource group) and gives the pod set the node labels and tolerations of the flavors
it was assigned. With ``cpu``, ``memory`` and ``nvidia.com/gpu`` in one group of the H20 flavor, the
RayJob's CPU-only head and KubeRay's submitter were given the H20 node selector too, so on a cluster
with CPU nodes for heads the head was pinned to a GPU node. ``cpu`` and ``memory`` are therefore
counted in a flavor with no node labels (:data:`DEFAULT_FLAVOR`, Kueue's "empty ResourceFlavor", named
as Kueue's own docs name it), and only ``nvidia.com/gpu`` in the H20 flavor: the GPU workers get the
H20 selector and tolerations, the head and the submitter any node their own spec allows.

``make tools`` builds the manager from its Go module (``sigs.k8s.io/kueue/cmd/kueue``, the version in
``images/pins.yaml``) into ``.tools/bin/kueue`` and links its CRDs (``.tools/crds/kueue``) and its
admission webhooks' manifests (``.tools/kueue-webhook``) from the same module.

The API server must reach Kueue's admission webhooks (its RayJob integration among them: it checks a
queued RayJob and keeps it suspended until admitted). On a process-based control plane there is no
Service to route to, so, as controller-runtime's envtest does, every webhook configuration (and the
conversion webhook of the CRDs that have one) is rewritten to ``clientConfig.url:
https://127.0.0.1:<port>/<path>`` with the ``caBundle`` of a CA made here, and Kueue serves on that
loopback port with a certificate of that CA.

Why Kueue's internal certificate management is on, with a Secret made here: with it off, Kueue 0.17's
manager reads its metrics certificate from the fixed path ``/etc/kueue/metrics/certs`` and exits when it
is missing. With it on, Kueue's certificate rotator (open-policy-agent/cert-controller) keeps a
certificate it finds valid in its Secret (signed by a CA named ``kueue-ca``, valid for its Service's name
beyond the rotator's 90-day look-ahead), injects that CA into the webhook configurations and CRDs it
names (the ones written here, under those names), and waits for the files in ``webhook.certDir`` (a
mounted Secret in a cluster; written here). The certificate made here also names 127.0.0.1, where the
API server calls. Only the webhooks of the kinds this project uses are installed: Kueue's own kinds and
RayJobs (the others, such as its Pod webhook, would put a call to Kueue in front of every Pod create).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from flashrl_devcluster.control_plane import (
    REPO,
    TOOLS,
    TOOLS_CRDS,
    ControlPlane,
    ControlPlaneError,
    Process,
    _openssl,
    free_ports,
)

KUEUE_CRDS = TOOLS_CRDS / "kueue"
KUEUE_WEBHOOKS = REPO / ".tools" / "kueue-webhook" / "manifests.yaml"
API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
#: Where Kueue keeps its Secret (and would run in a cluster).
KUEUE_NAMESPACE: Final = "kueue-system"
WEBHOOK_SERVICE: Final = "kueue-webhook-service"
WEBHOOK_SECRET: Final = "kueue-webhook-server-cert"
#: The CA name Kueue's certificate rotator checks its CA certificate against.
CA_NAME: Final = "kueue-ca"
#: The CRDs whose conversion webhook Kueue's rotator injects its CA into (Kueue's own kustomization).
CONVERSION_CRDS: Final = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
#: The integrations Kueue runs: RayJobs only (FlashRLJobs are queued as their RayJobs).
INTEGRATIONS: Final = ("ray.io/rayjob",)
#: The API groups (and, for ray.io, resources) whose webhooks are installed.
WEBHOOK_KINDS: Final = {"kueue.x-k8s.io": None, "ray.io": {"rayjobs"}}

#: The objects' names: the flavor of ``cpu`` and ``memory`` on any node, the H20 nodes' flavor of
#: ``nvidia.com/gpu``, the cluster's queue of their GPUs, and the queue a namespace's jobs name in
#: ``spec.scheduling.queueName`` (examples/flashrljob-kueue.yaml).
DEFAULT_FLAVOR: Final = "default-flavor"
GPU_FLAVOR: Final = "nvidia-h20"
CLUSTER_QUEUE: Final = "h20"
LOCAL_QUEUE: Final = "h20-training"
#: The PriorityClass examples/flashrljob-kueue.yaml names in ``spec.scheduling.priorityClassName``: without
#: it the API server refuses every pod of the job and Kueue creates no Workload for it (the operator fails
#: such a job at once, ``PriorityClassNotFound``).
PRIORITY_CLASS: Final = "rl-batch"
#: Above the 0 of pods that name no class (no class here is the global default), far below the system's.
PRIORITY_VALUE: Final = 1000
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
H20_PRODUCT: Final = "NVIDIA-H20"
#: One 8 x H20 node's allocatable, as the kwok nodes report it (kuberay_kwok.H20_CAPACITY).
NODE_GPUS: Final = 8
NODE_CPUS: Final = 192
NODE_MEMORY_GI: Final = 2048
READY_S: Final = 180.0


def queue_objects(
    nodes: int,
    namespace: str = "rl",
    *,
    node_labels: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    default_flavor: str = DEFAULT_FLAVOR,
    gpu_flavor: str = GPU_FLAVOR,
    cluster_queue: str = CLUSTER_QUEUE,
    local_queue: str = LOCAL_QUEUE,
    priority_class: str = PRIORITY_CLASS,
) -> list[dict[str, Any]]:
    """The flavor of ``cpu`` and ``memory`` (no node labels: Kueue adds no node selector for them), the
    flavor of the H20 nodes' GPUs (``nvidia.com/gpu.product: NVIDIA-H20`` and ``node_labels``; Kueue
    gives the pod sets that request ``nvidia.com/gpu`` that node selector and ``tolerations``), a
    ClusterQueue with one resource group each, the LocalQueue of ``namespace``, and the PriorityClass
    the queued jobs' pods name.

    The quota is ``nodes`` such nodes' GPUs, CPUs and memory: GPUs are what a job waits for; the CPUs
    and memory are what the GPU workers and the heads may take (on a cluster whose heads run on CPU
    nodes, add those nodes' CPUs and memory).

    The PriorityClass orders the queue's workloads (Kueue takes a workload's priority from its pods'
    class) and the pods waiting in the scheduler. Its ``preemptionPolicy`` is ``Never``: a training job's
    pods wait for GPUs rather than evict whatever else runs on the nodes (pods that name no class have
    priority 0, below it); what runs when is Kueue's to decide, by quota. Not the global default."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": default_flavor},
            "spec": {},
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": gpu_flavor},
            "spec": {
                "nodeLabels": {GPU_PRODUCT_LABEL: H20_PRODUCT, **(node_labels or {})},
                **({"tolerations": [dict(t) for t in tolerations]} if tolerations else {}),
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": default_flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": str(NODE_CPUS * nodes)},
                                    {"name": "memory", "nominalQuota": f"{NODE_MEMORY_GI * nodes}Gi"},
                                ],
                            }
                        ],
                    },
                    {
                        "coveredResources": [GPU_RESOURCE],
                        "flavors": [
                            {
                                "name": gpu_flavor,
                                "resources": [{"name": GPU_RESOURCE, "nominalQuota": str(NODE_GPUS * nodes)}],
                            }
                        ],
                    },
                ],
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": local_queue, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority_class},
            "value": PRIORITY_VALUE,
            "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": (
                "FlashRL training jobs (spec.scheduling.priorityClassName): Kueue orders queued jobs by "
                "it; their pods never preempt others"
            ),
        },
    ]


def _certificates(pki: Path) -> None:
    """A CA named :data:`CA_NAME` and a serving certificate for Kueue's Service name and 127.0.0.1, both
    valid for a year (beyond the rotator's 90-day look-ahead, so it keeps them)."""
    if (pki / "tls.crt").is_file():
        return
    pki.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365", "-subj", f"/O=kueue/CN={CA_NAME}",
        "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-addext", f"subjectAltName=DNS:{CA_NAME}",
    )  # fmt: skip
    # The rotator reads the CA's key as PKCS #1 ("RSA PRIVATE KEY") only.
    _openssl("rsa", "-in", str(pki / "ca.key"), "-traditional", "-out", str(pki / "ca.key"))
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc",
        "-keyout", str(pki / "tls.key"), "-out", str(pki / "tls.csr"),
    )  # fmt: skip
    (pki / "tls.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName=DNS:{WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc,"
        "IP:127.0.0.1\n"
    )
    _openssl(
        "x509", "-req", "-in", str(pki / "tls.csr"), "-CA", str(pki / "ca.crt"),
        "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "365",
        "-extfile", str(pki / "tls.ext"), "-out", str(pki / "tls.crt"),
    )  # fmt: skip


def _wanted(webhook: Mapping[str, Any]) -> bool:
    """Whether a webhook of Kueue's manifests concerns the kinds this project uses."""
    for rule in webhook.get("rules") or []:
        for group in rule.get("apiGroups") or []:
            if group not in WEBHOOK_KINDS:
                return False
            resources = WEBHOOK_KINDS[group]
            if resources is not None and not set(rule.get("resources") or []) <= resources:
                return False
    return True


def webhook_configurations(port: int, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations (its own kinds' and RayJobs' webhooks only), named as its
    rotator expects and pointed at ``https://127.0.0.1:<port>``."""
    if not KUEUE_WEBHOOKS.is_file():
        raise ControlPlaneError(f"Kueue's webhook manifests not found at {KUEUE_WEBHOOKS}: run `make tools`")
    configurations = []
    for doc in yaml.safe_load_all(KUEUE_WEBHOOKS.read_text()):
        if not doc:
            continue
        kind = "mutating" if doc["kind"] == "MutatingWebhookConfiguration" else "validating"
        webhooks = []
        for webhook in doc.get("webhooks") or []:
            if not _wanted(webhook):
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhooks.append(
                {**webhook, "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}}
            )
        doc["metadata"] = {"name": f"kueue-{kind}-webhook-configuration"}
        doc["webhooks"] = webhooks
        configurations.append(doc)
    return configurations


def crds(port: int, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's CRDs, those with versions to convert given the conversion webhook on loopback."""
    if not KUEUE_CRDS.is_dir():
        raise ControlPlaneError(f"Kueue's CRDs not found at {KUEUE_CRDS}: run `make tools`")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found = []
    for path in sorted(KUEUE_CRDS.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=loader)
        if crd["spec"]["names"]["plural"] in CONVERSION_CRDS:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": ca_bundle},
                    "conversionReviewVersions": ["v1"],
                },
            }
        found.append(crd)
    return found


def configuration(webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's configuration file: RayJobs only, everything on loopback, no leader election."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        "integrations": {"frameworks": list(INTEGRATIONS)},
        # Its on-demand visibility API would listen on every interface (port 8082) and needs an
        # APIService: not used here.
        "featureGates": {"VisibilityOnDemand": False},
    }


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_kueue(plane: ControlPlane, root: Path) -> Process:
    """Kueue's manager on ``plane``: its CRDs, Secret, webhook configurations and configuration file under
    ``root``, then the process; returns once its webhooks answer (a server-side dry run of a
    ResourceFlavor passes through them). KubeRay's CRDs must be installed first (its RayJob integration
    starts only when they are served)."""
    binary = TOOLS / "kueue"
    if not binary.is_file():
        raise ControlPlaneError(f"Kueue's manager not found at {binary}: run `make tools`")
    pki = root / "kueue-pki"
    _certificates(pki)
    cert_dir = root / "kueue-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        (cert_dir / name).write_bytes((pki / name).read_bytes())
    ca_bundle = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
    webhook_port, health_port, metrics_port = free_ports(3)
    plane.apply_json(crds(webhook_port, ca_bundle))
    plane.wait_established(
        "workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io"
    )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": WEBHOOK_SECRET, "namespace": KUEUE_NAMESPACE},
        "data": {
            "ca.crt": ca_bundle,
            "ca.key": base64.b64encode((pki / "ca.key").read_bytes()).decode(),
            "tls.crt": base64.b64encode((pki / "tls.crt").read_bytes()).decode(),
            "tls.key": base64.b64encode((pki / "tls.key").read_bytes()).decode(),
        },
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}
    plane.apply_json([namespace, secret, *webhook_configurations(webhook_port, ca_bundle)])
    config = root / "kueue-config.yaml"
    config.write_text(json.dumps(configuration(webhook_port, health_port, metrics_port, cert_dir), indent=1))
    process = Process.start(
        "kueue",
        [str(binary), f"--config={config}"],
        plane.root / "logs" / "kueue.log",
        plane.env(),
    )
    try:
        wait_kueue(plane, process, health_port)
    except BaseException:
        process.stop()
        raise
    return process


def wait_kueue(plane: ControlPlane, process: Process, health_port: int) -> None:
    """Until Kueue is ready and its webhooks answer the API server."""
    probe = queue_objects(1)[0] | {"metadata": {"name": "kueue-webhook-probe"}}
    body = json.dumps(probe)
    deadline = time.monotonic() + READY_S
    while True:
        if process.popen.poll() is not None:
            raise ControlPlaneError(f"kueue exited ({process.popen.returncode}):\n{process.tail()}")
        if _ready(health_port):
            out = plane.kubectl("create", "--dry-run=server", "-f", "-", stdin=body, check=False)
            if out.returncode == 0:
                return
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"Kueue not ready after {READY_S:.0f} s:\n{process.tail()}")
        time.sleep(0.5)
