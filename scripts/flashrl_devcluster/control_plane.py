"""A real Kubernetes control plane as plain processes, for the tests and ``make dev-cluster``: etcd,
kube-apiserver, kube-controller-manager and (optionally) kube-scheduler, like controller-runtime's envtest.

What runs is the real code: the API server judges schemas, CEL rules, RBAC, Pod Security and
server-side apply; the controller-manager collects garbage, finishes Jobs and mints service-account
tokens; the scheduler places pods on nodes (kwok plays those in the e2e). There is no kubelet.

The binaries come from ``make tools`` (``scripts/get-kube-tools.sh``: built from their Go modules into
``.tools/bin``, etcd 3.6 included). Every process is started in its own session and recorded with its
pid (and its start time) under the state directory; :meth:`ControlPlane.stop` ends exactly those, also
when a test failed, and :func:`stop_recorded` ends them from another process (``make dev-cluster-down``).
Everything listens on loopback ports picked free at start.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools" / "bin"
#: Upstream CRDs ``make tools`` links from the Go module cache (KubeRay's, the Prometheus Operator's).
TOOLS_CRDS = REPO / ".tools" / "crds"
#: KubeRay 1.7.0's CRDs (the pinned version the RayJob is rendered for), kept in the repository.
KUBERAY_PINNED_CRDS = REPO / "tests" / "data" / "crds" / "kuberay-v1.7.0"
#: Controllers the tests rely on: garbage collection (ownerReferences), namespaces, service accounts
#: and their tokens, Jobs (the staging Job, KubeRay's submitter), ReplicaSets and Deployments (the
#: chart's operator on kwok nodes), the aggregated ClusterRoles (the chart's user roles), and the binding
#: of claims to volumes (the e2e's claims, so their pods can be scheduled) and the protection of claims
#: and volumes (they lift a deleted claim's or volume's finalizer once nothing uses it, so a namespace
#: with claims can go), and the pod garbage collector (it ends pods that were deleted before a node ran them).
CONTROLLERS = (
    "garbagecollector",
    "namespace",
    "serviceaccount-token",
    "serviceaccount",
    "job",
    "root-ca-cert-publisher",
    "clusterrole-aggregation",
    "replicaset",
    "deployment",
    "persistentvolume-binder",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    "pod-garbage-collector-controller",
)
#: The user of :attr:`ControlPlane.operator_kubeconfig`.
OPERATOR_USER = "envtest-operator"
READY_DEADLINE_S = 180.0


class ControlPlaneError(RuntimeError):
    """A component did not start; the message carries the tail of its log."""


def find_binary(name: str) -> Path | None:
    """``.tools/bin/NAME`` (built or linked by ``make tools``), else NAME on PATH."""
    local = TOOLS / name
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which(name)
    return Path(found) if found else None


REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
#: What a dev cluster (and the kwok e2e tests) runs besides the control plane: the chart, KubeRay, kwok,
#: Kueue.
KWOK_CLUSTER = (*REQUIRED, "helm", "kuberay-operator", "kwok", "kueue")


def missing_binaries(names: Sequence[str] = REQUIRED) -> list[str]:
    """The binaries of :data:`REQUIRED` that are not there (``make tools`` builds them)."""
    return [n for n in names if not (TOOLS / n).is_file()]


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass
class Process:
    """One started process in its own session, its output in a log file; stopped by its process group."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> Process:
        """Start ``argv`` in a session of its own (so its whole group can be signalled), output to ``log``."""
        with log.open("ab") as sink:
            popen = subprocess.Popen(
                argv,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return cls(name, popen, log)

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 15.0) -> None:
        """``sig`` to the process group, then SIGKILL after ``grace_s``."""
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(grace_s)

    def tail(self, lines: int = 25) -> str:
        """The last lines of its log, for error messages."""
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


@dataclass
class ControlPlane:
    """The running control plane; ``kubeconfig`` is an admin's (system:masters)."""

    root: Path
    api_port: int = 0
    admin_token: str = ""
    processes: list[Process] = field(default_factory=list)
    version: str = ""
    audit_log: Path | None = None
    """The API server's audit log, when it was started with one (:mod:`envtest.audit`)."""
    apiserver_argv: list[str] = field(default_factory=list)
    """kube-apiserver's command line, to start it again (:meth:`restart_apiserver`)."""

    # ---- paths -------------------------------------------------------------------------------
    @property
    def pki(self) -> Path:
        """Certificates, keys and the token file."""
        return self.root / "pki"

    @property
    def kubeconfig(self) -> Path:
        """An admin's kubeconfig (system:masters)."""
        return self.root / "kubeconfig"

    @property
    def operator_kubeconfig(self) -> Path:
        """A kubeconfig of the user :data:`OPERATOR_USER` (cluster-admin), for operators run in tests."""
        return self.root / "operator.kubeconfig"

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca(self) -> Path:
        """The cluster CA's certificate."""
        return self.pki / "ca.crt"

    # ---- start / stop ------------------------------------------------------------------------
    @classmethod
    def attach(cls, root: Path) -> ControlPlane:
        """The control plane another process started under ``root`` (``make dev-cluster``), for its
        clients: its admin kubeconfig gives the port and the token. Its processes are not this one's."""
        config = json.loads((root / "kubeconfig").read_text())
        server = config["clusters"][0]["cluster"]["server"]
        token = config["users"][0]["user"]["token"]
        return cls(root, api_port=int(server.rsplit(":", 1)[1]), admin_token=token)

    def start(self, *, scheduler: bool = True, apiserver_args: Sequence[str] = ()) -> ControlPlane:
        """Start etcd, the API server, the controller-manager and the scheduler; wait for /readyz.

        ``apiserver_args`` are added to kube-apiserver's (the benchmark turns its audit log on)."""
        missing = missing_binaries()
        if missing:
            raise ControlPlaneError(f"missing {', '.join(missing)}: run `make tools`")
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        self._certificates()
        tokens = self._tokens()
        self.admin_token = tokens["admin"]
        etcd_port, peer_port, self.api_port = free_ports(3)
        try:
            self._spawn(
                "etcd",
                [
                    str(TOOLS / "etcd"),
                    "--name=envtest",
                    f"--data-dir={self.root / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-cluster=envtest=http://127.0.0.1:{peer_port}",
                    "--initial-cluster-state=new",
                    "--log-level=warn",
                ],
            )
            self.apiserver_argv = [*self._apiserver_args(etcd_port), *apiserver_args]
            self._spawn("kube-apiserver", self.apiserver_argv)
            self._write_kubeconfig(self.kubeconfig, "admin", self.admin_token)
            self._write_kubeconfig(self.root / "kcm.kubeconfig", "kcm", tokens["kcm"])
            self._write_kubeconfig(self.root / "scheduler.kubeconfig", "scheduler", tokens["scheduler"])
            self._write_kubeconfig(self.operator_kubeconfig, "operator", tokens["operator"])
            self._wait_ready()
            self._spawn(
                "kube-controller-manager",
                [
                    str(TOOLS / "kube-controller-manager"),
                    f"--kubeconfig={self.root / 'kcm.kubeconfig'}",
                    "--leader-elect=false",
                    f"--controllers={','.join(CONTROLLERS)}",
                    f"--service-account-private-key-file={self.pki / 'sa.key'}",
                    f"--root-ca-file={self.ca}",
                    "--use-service-account-credentials=false",
                    "--secure-port=0",
                ],
            )
            if scheduler:
                self._spawn(
                    "kube-scheduler",
                    [
                        str(TOOLS / "kube-scheduler"),
                        f"--kubeconfig={self.root / 'scheduler.kubeconfig'}",
                        "--leader-elect=false",
                        "--secure-port=0",
                    ],
                )
            self.version = json.loads(self.get("/version"))["gitVersion"]
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End every started process (reverse order): SIGTERM to its session, SIGKILL after 15 s."""
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()
        with contextlib.suppress(OSError):
            (self.root / "pids").unlink()

    def restart_apiserver(self, sig: int = signal.SIGKILL) -> None:
        """End kube-apiserver (``sig``: SIGKILL, a crash, by default) and start it again on the same
        port and etcd; returns once it answers ``/readyz`` ok. Clients see refused connections, then,
        for a moment after it listens, whatever a starting server answers (a 403 while its authorizer
        has not synced RBAC yet)."""
        (old,) = [p for p in self.processes if p.name == "kube-apiserver"]
        old.stop(sig)
        new = Process.start("kube-apiserver", self.apiserver_argv, old.log)
        self.processes[self.processes.index(old)] = new
        self.record(new)
        self._wait_ready()

    def check_alive(self) -> None:
        """Fail loudly (with the log's tail) if a component has exited."""
        for proc in self.processes:
            if proc.popen.poll() is not None:
                raise ControlPlaneError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")

    # ---- clients ---------------------------------------------------------------------------------
    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """The environment for kubectl, helm and the operator: this cluster's kubeconfig, tools on PATH."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(kubeconfig or self.kubeconfig)
        env["PATH"] = f"{TOOLS}:{env.get('PATH', '')}"
        env["HELM_CACHE_HOME"] = str(self.root / "helm" / "cache")
        env["HELM_CONFIG_HOME"] = str(self.root / "helm" / "config")
        env["HELM_DATA_HOME"] = str(self.root / "helm" / "data")
        return env

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl (the server's version) against this cluster."""
        return self._run([str(TOOLS / "kubectl"), *args], stdin, check, kubeconfig)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the project's helm (``make tools``) against this cluster."""
        helm = find_binary("helm")
        assert helm is not None, "helm is missing: run `make tools`"
        return self._run([str(helm), *args], None, check, None)

    def apply_json(self, obj: dict[str, Any] | list[dict[str, Any]], *extra: str) -> str:
        """``kubectl apply -f -`` of objects (server-side, forced, so tests own what they set)."""
        items = obj if isinstance(obj, list) else [obj]
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        return self.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", *extra, stdin=body
        ).stdout

    def get_json(self, *args: str, check: bool = True) -> Any:
        """``kubectl get ... -o json`` parsed (None when absent and ``check`` is false)."""
        out = self.kubectl("get", *args, "-o", "json", check=check)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def wait_established(self, *crds: str, deadline_s: float = 120.0) -> None:
        """Until every named CRD is Established (served). ``kubectl wait`` fails instead of waiting
        when a CRD it reads has no status yet, which happens right after it is applied."""
        deadline = time.monotonic() + deadline_s
        while True:
            out = self.kubectl("get", "crd", *crds, "-o", "json", check=False)
            found = json.loads(out.stdout) if out.returncode == 0 else {}
            items = found.get("items", [found] if found else [])  # one name: the object, not a List
            established = {
                item["metadata"]["name"]
                for item in items
                for c in (item.get("status") or {}).get("conditions") or []
                if c["type"] == "Established" and c["status"] == "True"
            }
            if established >= set(crds):
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"CRDs not established after {deadline_s:.0f} s: {set(crds) - established}"
                )
            time.sleep(0.3)

    def get(self, path: str) -> str:
        """GET a raw API path as the admin."""
        request = urllib.request.Request(self.server + path, headers=self._auth())
        with urllib.request.urlopen(request, context=self._ssl(), timeout=10) as resp:
            return str(resp.read().decode())

    def token_kubeconfig(self, service_account: str, namespace: str, name: str, duration: str = "2h") -> Path:
        """A kubeconfig holding a fresh token of ``namespace/service_account`` (TokenRequest API), so a
        process using it has exactly the RBAC that account was granted."""
        token = self.kubectl(
            "create", "token", service_account, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        path = self.root / f"{name}.kubeconfig"
        self._write_kubeconfig(path, name, token, namespace=namespace)
        return path

    # ---- internals ------------------------------------------------------------------------------
    def _run(
        self, argv: list[str], stdin: str | None, check: bool, kubeconfig: Path | None
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, env=self.env(kubeconfig), timeout=300
        )
        if check and out.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv[:4])} ... failed ({out.returncode}):\n{out.stderr}{out.stdout}"
            )
        return out

    def _spawn(self, name: str, argv: list[str]) -> None:
        proc = Process.start(name, argv, self.root / "logs" / f"{name}.log")
        self.processes.append(proc)
        self.record(proc)

    def record(self, proc: Process) -> None:
        """Write ``proc``'s name, pid and start time to the state directory's ``pids`` file, which
        :func:`stop_recorded` reads."""
        with (self.root / "pids").open("a") as pids:
            pids.write(f"{proc.name} {proc.popen.pid} {start_time(proc.popen.pid) or '-'}\n")

    def _apiserver_args(self, etcd_port: int) -> list[str]:
        pki = self.pki
        return [
            str(TOOLS / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={self.ca}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,PodSecurity",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={pki}",
        ]

    def _certificates(self) -> None:
        pki = self.pki
        if (pki / "apiserver.crt").is_file():
            return
        pki.mkdir(parents=True, exist_ok=True)
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=envtest-ca",
            "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"),
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
            "-keyout", str(pki / "apiserver.key"), "-out", str(pki / "apiserver.csr"),
        )  # fmt: skip
        (pki / "apiserver.ext").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,"
            "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        )
        _openssl(
            "x509", "-req", "-in", str(pki / "apiserver.csr"), "-CA", str(pki / "ca.crt"),
            "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "30",
            "-extfile", str(pki / "apiserver.ext"), "-out", str(pki / "apiserver.crt"),
        )  # fmt: skip
        _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))

    def _tokens(self) -> dict[str, str]:
        path = self.pki / "tokens.csv"
        users = {
            "admin": ("envtest-admin", "system:masters"),
            "kcm": ("system:kube-controller-manager", "system:masters"),
            "scheduler": ("system:kube-scheduler", "system:masters"),
            # An operator that a test runs in its own process (a thread): a user of its own, so the
            # audit log tells its requests from the test's.
            "operator": (OPERATOR_USER, "system:masters"),
        }
        if not path.is_file():
            lines = [f'{os.urandom(24).hex()},{user},{user},"{group}"' for user, group in users.values()]
            write_private(path, "\n".join(lines) + "\n")
        tokens = [line.split(",", 1)[0] for line in path.read_text().splitlines()]
        return dict(zip(users, tokens, strict=True))

    def _write_kubeconfig(self, path: Path, user: str, token: str, namespace: str = "default") -> None:
        ca = base64.b64encode(self.ca.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "envtest", "cluster": {"server": self.server, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {"name": user, "context": {"cluster": "envtest", "user": user, "namespace": namespace}}
            ],
            "current-context": user,
        }
        write_private(path, json.dumps(config, indent=1))

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_DEADLINE_S
        while True:
            self.check_alive()
            with contextlib.suppress(OSError, urllib.error.URLError, ssl.SSLError):
                if self.get("/readyz") == "ok":
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"kube-apiserver not ready after {READY_DEADLINE_S:.0f} s")
            time.sleep(0.2)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only from the first byte: a new file created
    with mode 0600 (whatever the umask lets through of it, never more), then renamed over ``path``, so
    no other user can open a token in the moment between a write and a chmod, nor keep a file open
    that was readable before."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        scratch.unlink()
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as sink:
            sink.write(text)
        scratch.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            scratch.unlink()
        raise


def start_time(pid: int) -> str | None:
    """When the kernel started ``pid`` (``/proc/PID/stat`` field 22, clock ticks since boot), or
    ``None`` when no such process lives. With the pid it names one process: a pid the kernel gave to
    another process since is never signalled."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]  # a zombie has ended: its parent only has to reap it


def recorded(root: Path) -> list[tuple[str, int]]:
    """The processes of the ``pids`` file under ``root`` that still live: (name, pid), in start order."""
    try:
        lines = (root / "pids").read_text().splitlines()
    except OSError:
        return []
    alive = []
    for line in lines:
        name, pid, started = [*line.split(), "-"][:3]
        if start_time(int(pid)) == started:
            alive.append((name, int(pid)))
    return alive


def stop_recorded(root: Path, grace_s: float = 20.0) -> list[str]:
    """End the processes recorded under ``root`` by another run (``make dev-cluster-down``): SIGTERM to
    each one's session, last started first, then SIGKILL to what still lives after ``grace_s``. Only a
    recorded pid whose start time still matches is signalled. Returns the names that were running."""
    alive = recorded(root)
    for _, pid in reversed(alive):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while start_time(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
    for _, pid in recorded(root):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        (root / "pids").unlink()
    return [name for name, _ in alive]


@contextlib.contextmanager
def running(
    root: Path, *, scheduler: bool = True, apiserver_args: Sequence[str] = ()
) -> Iterator[ControlPlane]:
    """A started control plane, stopped on exit whatever happened."""
    plane = ControlPlane(root)
    try:
        yield plane.start(scheduler=scheduler, apiserver_args=apiserver_args)
    finally:
        plane.stop()
