"""``flashrl preflight``: what a FlashRLJob needs from the cluster that no manifest shows, read with
the user's kubeconfig.
"""

from __future__ import annotations

import argparse
import sys

from flashrl_operator.cli.common import Command, read_job, source_name


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    p.add_argument("-n", "--namespace", help="namespace the job will be applied to (default: its own)")
    p.add_argument("file", help="manifest holding one FlashRLJob, or '-' for standard input")


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl preflight``."""
    import asyncio

    from flashrl_api.pins import load_pins
    from flashrl_operator.job.preflight import cluster_problems, gather, with_namespace

    job = with_namespace(read_job(args.file), args.namespace)
    try:
        from flashrl_operator.client.kube import KubeClient
        from flashrl_operator.client.login import Credentials
    except ImportError as exc:
        print(f"flashrl preflight needs the operator extra (kubernetes_asyncio): {exc}", file=sys.stderr)
        return 1

    async def check() -> list[str]:
        # Like kubectl: $KUBECONFIG (or ~/.kube/config) and its current context, exec plugins included.
        kube = await KubeClient.connect(Credentials())
        try:
            facts = await gather(kube, job)
        finally:
            await kube.close()
        return cluster_problems(job, facts, load_pins().versions.kuberay)

    try:
        problems = asyncio.run(check())
    except Exception as exc:  # credentials, an unreachable or refusing API server: one line, exit 1
        print(f"preflight: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f'{source_name(args.file)}: the cluster has what FlashRLJob "{job.name}" needs in {job.namespace}')
    return 0


COMMAND = Command(
    "preflight",
    help="check a cluster has what a FlashRLJob needs (your kubeconfig)",
    description=(
        "Check, with your kubeconfig ($KUBECONFIG or ~/.kube/config, its current context), "
        "what `flashrl validate` cannot see offline: the namespace, the claims (bound, access modes), the "
        "Secrets, nodes with the GPU product and enough allocatable GPUs, and KubeRay's CRDs at the pinned "
        "version. Prints one line per problem on stderr and exits 1, or one line and exits 0. Reads only."
    ),
    arguments=arguments,
    run=run,
)
