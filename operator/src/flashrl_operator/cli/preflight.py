"""``flashrl preflight``: what a FlashRLJob, or every variant of a FlashRLExperiment, needs from the
cluster that no manifest shows, read with the user's kubeconfig.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from flashrl_api import FlashRLJob, load_documents
from flashrl_operator.cli.common import Command, read_job, read_text, report_problems, source_name


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    p.add_argument("-n", "--namespace", help="namespace the job will be applied to (default: its own)")
    p.add_argument(
        "file", help="manifest holding one FlashRLJob or FlashRLExperiment, or '-' for standard input"
    )


async def gather(kube: Any, jobs: Sequence[FlashRLJob]) -> Any:
    """Read what :func:`~flashrl_operator.job.preflight.cluster_problems` needs for ``jobs`` (one
    namespace) through the operator's :class:`~flashrl_operator.client.kube.KubeClient`. A list the
    user's RBAC refuses is recorded as not read (``None``), never taken for an empty one."""
    import time
    from dataclasses import replace
    from urllib.parse import quote

    from flashrl_operator.client.errors import ApiError
    from flashrl_operator.job.preflight import (
        KUBERAY_CRDS,
        ClusterFacts,
        cluster_needs,
        gpus_in_use,
        matching_nodes,
    )
    from flashrl_operator.vocab.kinds import PERSISTENT_VOLUME_CLAIM, PRIORITY_CLASS
    from flashrl_operator.vocab.kuberay import OPERATOR_LABEL, OPERATOR_LEASE

    async def listed(path: str) -> list[dict[str, Any]] | None:
        try:
            found = await kube.read_path(path)
        except ApiError as exc:
            if exc.status in (401, 403):
                return None
            raise
        return [i for i in ((found or {}).get("items") or []) if isinstance(i, dict)]

    needs = [cluster_needs(job) for job in jobs]
    ns = needs[0].namespace
    claims = {c: await kube.get(PERSISTENT_VOLUME_CLAIM, ns, c) for n in needs for c in n.claims}
    secrets = {
        s: await kube.read_path(f"/api/v1/namespaces/{ns}/secrets/{s}") for n in needs for s in n.secrets
    }
    classes: dict[str, dict[str, Any] | None] = {}
    unread: list[str] = []
    for name in dict.fromkeys(c for n in needs for c in n.priority_classes):
        try:
            classes[name] = await kube.get(PRIORITY_CLASS, None, name)
        except ApiError as exc:  # cluster-scoped: a namespace's user may not read them
            if exc.status not in (401, 403):
                raise
            unread.append(name)
    nodes = await listed("/api/v1/nodes")
    crds = {
        c: await kube.read_path(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{c}")
        for c in KUBERAY_CRDS
    }
    deployments = await listed(f"/apis/apps/v1/deployments?labelSelector={quote(OPERATOR_LABEL)}")
    leases = await listed(
        "/apis/coordination.k8s.io/v1/leases?fieldSelector=" + quote(f"metadata.name={OPERATOR_LEASE}")
    )
    images = [
        str(c.get("image"))
        for d in deployments or []
        for c in ((((d.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])
    ]
    facts = ClusterFacts(
        namespace=await kube.read_path(f"/api/v1/namespaces/{ns}"),
        claims=claims,
        secrets=secrets,
        nodes=nodes or [],
        crds=crds,
        kuberay_images=images,
        kuberay_deployments=deployments,
        kuberay_leases=leases,
        nodes_readable=nodes is not None,
        priority_classes=classes,
        priority_classes_unread=tuple(unread),
    )
    # Free GPUs: the pods bound to each node that carries a job's GPU labels, read node by node.
    names = sorted({n.name for job in jobs for n in matching_nodes(job, facts)})
    pods: list[dict[str, Any]] | None = []
    for name in names:
        selector = quote(f"spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed")
        found = await listed(f"/api/v1/pods?fieldSelector={selector}")
        if found is None:
            pods = None
            break
        pods = [*(pods or []), *found]
    return replace(facts, gpus_in_use=None if pods is None else gpus_in_use(pods), now=time.time())


def _read(source: str, namespace: str | None) -> tuple[str, str, list[tuple[str, FlashRLJob]], int | None]:
    """(kind, name, [(variant or "", job)], parallelism) of the manifest; a FlashRLExperiment gives each
    variant's FlashRLJob as the operator will create it."""
    from flashrl_api import SpecError
    from flashrl_api.experiment import experiment_problems, variant_jobs, variants_of
    from flashrl_operator.job.preflight import with_namespace

    text = read_text(source)
    docs = load_documents(text, source_name(source))
    if len(docs) == 1 and isinstance(docs[0], Mapping) and docs[0].get("kind") == "FlashRLExperiment":
        experiment, problems = experiment_problems(docs[0])
        if problems or experiment is None:
            raise SpecError(problems)
        template = docs[0].get("spec", {}).get("template") or {}
        jobs = variant_jobs(experiment, template)
        pairs = [
            (v.name, with_namespace(j, namespace))
            for v, j in zip(variants_of(experiment.spec), jobs, strict=True)
        ]
        return "FlashRLExperiment", experiment.name, pairs, experiment.spec.parallelism
    job = with_namespace(read_job(source, io.StringIO(text)), namespace)
    return "FlashRLJob", job.name, [("", job)], None


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl preflight``."""
    import asyncio

    from flashrl_api import SpecError
    from flashrl_api.pins import load_pins
    from flashrl_api.pools import gpu_pools
    from flashrl_operator.job.preflight import cluster_notes, cluster_problems, experiment_check, pool_fits

    try:
        kind, name, variants, parallelism = _read(args.file, args.namespace)
    except SpecError as exc:
        return report_problems(exc.problems, sys.stderr)
    jobs = [job for _, job in variants]
    namespace = jobs[0].namespace
    try:
        from flashrl_operator.client.kube import KubeClient
        from flashrl_operator.client.login import Credentials
    except ImportError as exc:
        print(f"flashrl preflight needs the operator extra (kubernetes_asyncio): {exc}", file=sys.stderr)
        return 1

    async def read() -> Any:
        # Like kubectl: $KUBECONFIG (or ~/.kube/config) and its current context, exec plugins included.
        kube = await KubeClient.connect(Credentials())
        try:
            return await gather(kube, jobs)
        finally:
            await kube.close()

    try:
        facts = asyncio.run(read())
    except Exception as exc:  # credentials, an unreachable or refusing API server: one line, exit 1
        print(f"preflight: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    kuberay = load_pins().versions.kuberay
    for note in cluster_notes(facts):
        print(f"note: {note}", file=sys.stderr)
    if kind == "FlashRLJob":
        problems = cluster_problems(jobs[0], facts, kuberay)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            return 1
        print(f'{source_name(args.file)}: the cluster has what FlashRLJob "{name}" needs in {namespace}')
        fits = pool_fits(jobs[0], facts)
        if len(fits) > 1 and facts.nodes_readable:
            for fit in fits:
                print(f"  {fit.describe()}")
        return 0
    check = experiment_check(variants, parallelism, facts, kuberay)
    for line in check.shared:
        print(line, file=sys.stderr)
    for variant, lines in check.variants.items():
        for line in lines:
            print(f"variant {variant}: {line}", file=sys.stderr)
    for line in check.capacity:
        print(line, file=sys.stderr)
    verdict = "has" if check.ok else "lacks"
    out = sys.stdout if check.ok else sys.stderr
    print(
        f'{source_name(args.file)}: the cluster {verdict} what FlashRLExperiment "{name}" needs in '
        f"{namespace}, {check.at_once} of {len(variants)} variants at a time:",
        file=out,
    )
    for (variant, job), lines in zip(variants, check.variants.values(), strict=True):
        state = "ok" if not lines and not check.shared else f"{len(lines) + len(check.shared)} problem(s)"
        pools = gpu_pools(job.spec)
        shape = " + ".join(
            f"{p.nodes}x{p.gpus_per_node} {p.gpu_product}" + (f" ({p.name})" if len(pools) > 1 else "")
            for p in pools
        )
        print(f"  variant {variant} (FlashRLJob {job.name}): {shape}: {state}", file=out)
    return 0 if check.ok else 1


COMMAND = Command(
    "preflight",
    help="check a cluster has what a FlashRLJob or FlashRLExperiment needs (your kubeconfig)",
    description=(
        "Check, with your kubeconfig ($KUBECONFIG or ~/.kube/config, its current context), "
        "what `flashrl validate` cannot see offline: the namespace, the claims (bound, access modes), the "
        "Secrets, the PriorityClass the pods name (the operator's own judgement: a job naming one that "
        "does not exist fails PriorityClassNotFound), nodes with the GPU product and enough allocatable "
        "GPUs whose taints the pods tolerate (the operator's own judgement: a job that never fits fails "
        "NeverFits), and enough of them free now "
        "(allocatable minus what pods that have not terminated request), KubeRay's CRDs at the pinned "
        "version, and KubeRay's operator running (a Deployment labelled "
        "app.kubernetes.io/name=kuberay-operator with a ready replica, or its leader-election Lease "
        "ray-operator-leader held). A FlashRLExperiment is checked variant by variant, and its "
        "variants that run at once (spec.parallelism) together. What your RBAC does not let it read is "
        "named in a 'note:' line. Prints one line per problem on stderr and exits 1, or what it checked "
        "and exits 0. Invalid manifests exit 2 as with `flashrl validate`. Reads only."
    ),
    arguments=arguments,
    run=run,
)
