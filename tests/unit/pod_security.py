"""Which Pod Security Standard level a pod spec meets: the controls of the Kubernetes PSS page, as a table.

Source: https://kubernetes.io/docs/concepts/security/pod-security-standards/ (policy version
"latest"), the baseline and restricted controls that apply to a pod spec. Hand-written, and kept to the
table on that page, because no maintained checker of the standard's levels is on PyPI: the one
package that claims it (k8s-policy-guard 1.0.0) had a single release and no users to speak of, and
checkov, which is maintained, checks its own CKV_K8S_* policies (with different thresholds) rather than
the standard's two levels. The authoritative implementation is Go
(``k8s.io/pod-security-admission/policy``), which cannot run here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)

Check = Callable[[dict[str, Any]], Iterator[str]]


def containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Containers, init containers and ephemeral containers."""
    for key in ("containers", "initContainers", "ephemeralContainers"):
        yield from pod.get(key) or []


def _sc(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("securityContext") or {}


# --- baseline ----------------------------------------------------------------------------------------


def _host_process(pod: dict[str, Any]) -> Iterator[str]:
    for obj in (pod, *containers(pod)):
        if (_sc(obj).get("windowsOptions") or {}).get("hostProcess"):
            yield "windowsOptions.hostProcess"


def _host_namespaces(pod: dict[str, Any]) -> Iterator[str]:
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            yield key


def _privileged(pod: dict[str, Any]) -> Iterator[str]:
    for c in containers(pod):
        if _sc(c).get("privileged"):
            yield f"{c['name']}: privileged"


def _baseline_capabilities(pod: dict[str, Any]) -> Iterator[str]:
    for c in containers(pod):
        for cap in (_sc(c).get("capabilities") or {}).get("add") or []:
            if cap not in BASELINE_CAPABILITIES:
                yield f"{c['name']}: adds {cap}"


def _host_path(pod: dict[str, Any]) -> Iterator[str]:
    for v in pod.get("volumes") or []:
        if "hostPath" in v:
            yield f"volume {v['name']}: hostPath"


def _host_ports(pod: dict[str, Any]) -> Iterator[str]:
    for c in containers(pod):
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                yield f"{c['name']}: hostPort {port['hostPort']}"


def _app_armor(pod: dict[str, Any]) -> Iterator[str]:
    for obj in (pod, *containers(pod)):
        kind = (_sc(obj).get("appArmorProfile") or {}).get("type")
        if kind not in (None, "RuntimeDefault", "Localhost"):
            yield f"appArmorProfile {kind}"


def _selinux(pod: dict[str, Any]) -> Iterator[str]:
    for obj in (pod, *containers(pod)):
        options = _sc(obj).get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            yield f"seLinuxOptions {options}"


def _proc_mount(pod: dict[str, Any]) -> Iterator[str]:
    for c in containers(pod):
        if _sc(c).get("procMount") not in (None, "Default"):
            yield f"{c['name']}: procMount {_sc(c)['procMount']}"


def _seccomp_not_unconfined(pod: dict[str, Any]) -> Iterator[str]:
    for obj in (pod, *containers(pod)):
        if (_sc(obj).get("seccompProfile") or {}).get("type") == "Unconfined":
            yield "seccompProfile Unconfined"


def _sysctls(pod: dict[str, Any]) -> Iterator[str]:
    for sysctl in _sc(pod).get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            yield f"sysctl {sysctl['name']}"


# --- restricted --------------------------------------------------------------------------------------


def _volume_types(pod: dict[str, Any]) -> Iterator[str]:
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            yield f"volume {v['name']}: {', '.join(sorted(kinds - RESTRICTED_VOLUMES))}"


def _privilege_escalation(pod: dict[str, Any]) -> Iterator[str]:
    for c in containers(pod):
        if _sc(c).get("allowPrivilegeEscalation") is not False:
            yield f"{c['name']}: allowPrivilegeEscalation is not false"


def _non_root(pod: dict[str, Any]) -> Iterator[str]:
    pod_level = _sc(pod).get("runAsNonRoot")
    for c in containers(pod):
        own = _sc(c).get("runAsNonRoot")
        if own is False or (own is None and pod_level is not True):
            yield f"{c['name']}: runAsNonRoot is not true"


def _non_root_user(pod: dict[str, Any]) -> Iterator[str]:
    for obj in (pod, *containers(pod)):
        if _sc(obj).get("runAsUser") == 0:
            yield "runAsUser 0"


def _seccomp_set(pod: dict[str, Any]) -> Iterator[str]:
    pod_level = (_sc(pod).get("seccompProfile") or {}).get("type")
    for c in containers(pod):
        kind = (_sc(c).get("seccompProfile") or {}).get("type") or pod_level
        if kind not in ("RuntimeDefault", "Localhost"):
            yield f"{c['name']}: seccompProfile {kind}"


def _restricted_capabilities(pod: dict[str, Any]) -> Iterator[str]:
    for c in containers(pod):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"{c['name']}: does not drop ALL capabilities"
        for cap in caps.get("add") or []:
            if cap != "NET_BIND_SERVICE":
                yield f"{c['name']}: adds {cap}"


CONTROLS: dict[str, list[tuple[str, Check]]] = {
    "baseline": [
        ("HostProcess", _host_process),
        ("Host Namespaces", _host_namespaces),
        ("Privileged Containers", _privileged),
        ("Capabilities", _baseline_capabilities),
        ("HostPath Volumes", _host_path),
        ("Host Ports", _host_ports),
        ("AppArmor", _app_armor),
        ("SELinux", _selinux),
        ("/proc Mount Type", _proc_mount),
        ("Seccomp", _seccomp_not_unconfined),
        ("Sysctls", _sysctls),
    ],
    "restricted": [
        ("Volume Types", _volume_types),
        ("Privilege Escalation", _privilege_escalation),
        ("Running as Non-root", _non_root),
        ("Running as Non-root user", _non_root_user),
        ("Seccomp", _seccomp_set),
        ("Capabilities", _restricted_capabilities),
    ],
}


def failures(pod: dict[str, Any], level: str) -> list[str]:
    """``control: detail`` for each control of ``level`` (restricted includes baseline) the pod fails."""
    levels = ["baseline"] if level == "baseline" else ["baseline", "restricted"]
    return [f"{name}: {detail}" for lvl in levels for name, check in CONTROLS[lvl] for detail in check(pod)]


def level(pod: dict[str, Any]) -> str:
    """The strictest level the pod spec meets: ``restricted``, ``baseline`` or ``privileged``."""
    if not failures(pod, "baseline"):
        return "restricted" if not failures(pod, "restricted") else "baseline"
    return "privileged"
