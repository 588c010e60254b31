"""``flashrl operator``: the operator in the foreground, configured as the chart configures it."""

from __future__ import annotations

import argparse
import sys

from flashrl_operator.cli.common import EXIT_INVALID, Command, repeatable


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    repeatable(
        p, "--namespace", metavar="NS", help="watch only this namespace (repeatable; default: all namespaces)"
    )
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use outside a cluster (default: $KUBECONFIG, else ~/.kube/config; in a pod "
        "the service account)",
    )
    p.add_argument("--log-format", choices=("plain", "json"), default="plain", help="log format")
    p.add_argument("--metrics-port", type=int, default=8080, help="port serving /metrics (default: 8080)")
    p.add_argument("--health-port", type=int, default=8081, help="port serving /healthz (default: 8081)")
    p.add_argument(
        "--bind-address",
        default="0.0.0.0",  # noqa: S104  (a pod must be reachable by its probes and Prometheus)
        metavar="ADDRESS",
        help="address /metrics and /healthz listen on (default: 0.0.0.0, as a pod needs; 127.0.0.1 on a "
        "laptop or a dev cluster)",
    )
    p.add_argument(
        "--default-trainer-image",
        metavar="REF",
        help="trainer image for jobs that name none (default: the pinned images.trainer of "
        "images/pins.yaml); the chart passes its defaultTrainerImage value",
    )
    p.add_argument(
        "--leader-election",
        action="store_true",
        help="reconcile only while holding the Lease flashrl-operator in $POD_NAMESPACE (run two or "
        "more replicas; the others watch and take over when the leader stops renewing it)",
    )
    p.add_argument(
        "--lease-duration",
        type=int,
        default=15,
        metavar="SECONDS",
        help="seconds without renewal after which another replica takes the Lease (default: 15, at least 3)",
    )
    p.add_argument(
        "--max-concurrent-reconciles",
        type=int,
        default=16,
        metavar="N",
        help="job reconciles under way at once; bounds memory when many jobs arrive together (default: 16)",
    )
    p.add_argument(
        "--verl-check-slots",
        type=int,
        default=None,
        metavar="N",
        help="verl configuration checks under way at once, each a child process of about 70 MiB; one "
        "namespace holds all but one of them (default: as many as the container's CPU quota and memory "
        "limit hold)",
    )
    p.add_argument(
        "--no-fit-check",
        action="store_true",
        help="do not fail a new job whose GPU pods can never fit on the cluster's nodes (NeverFits), whose "
        "claim does not exist (ClaimNotFound) or whose PriorityClass does not exist (PriorityClassNotFound); "
        "for clusters that add GPU nodes on demand (an autoscaler)",
    )
    p.add_argument("--verbose", action="store_true", help="debug logging")
    policy = p.add_argument_group(
        "admin policy", "refuse FlashRLJobs (reason PolicyViolation) that ask for more than this"
    )
    repeatable(
        policy,
        "--allowed-registry",
        metavar="REGISTRY[/PATH]",
        help="registry (or registry path) images may come from; repeatable (default: any)",
    )
    repeatable(
        policy,
        "--allowed-priority-class",
        metavar="NAME",
        help="PriorityClass a job may use; repeatable (default: any)",
    )
    repeatable(
        policy,
        "--allowed-rdma-resource",
        metavar="RESOURCE",
        help="extended resource spec.resources.rdma.resourceName may request; repeatable (default: any)",
    )
    policy.add_argument(
        "--forbid-keyless-exists-tolerations",
        action="store_true",
        help="refuse tolerations with operator Exists and no key (they tolerate every taint)",
    )
    network = p.add_argument_group("network", "the NetworkPolicy rendered for every job's Ray pods")
    network.add_argument("--no-network-policy", action="store_true", help="render and apply no NetworkPolicy")
    network.add_argument(
        "--network-policy-kuberay-namespace",
        default="kuberay-system",
        metavar="NS",
        help="namespace of the KubeRay operator, admitted to the dashboard port (default: kuberay-system)",
    )
    network.add_argument(
        "--network-policy-monitoring-namespace",
        default="monitoring",
        metavar="NS",
        help="namespace of Prometheus, admitted to the metrics ports; empty: none (default: monitoring)",
    )
    repeatable(
        network,
        "--network-policy-metrics-port",
        metavar="PORT",
        help="metrics port of the Ray pods; repeatable (default: 8080)",
        type=int,
    )
    network.add_argument(
        "--network-policy-restrict-egress",
        action="store_true",
        help="allow egress only to the job's own pods, cluster DNS and --network-policy-egress-cidr",
    )
    repeatable(
        network,
        "--network-policy-egress-cidr",
        metavar="CIDR",
        help="with --network-policy-restrict-egress: a CIDR the Ray pods may reach; repeatable",
    )


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl operator``."""
    try:
        from flashrl_operator.run.handlers import OperatorConfig
        from flashrl_operator.run.runner import run_foreground
    except ImportError as exc:
        print(
            f"flashrl operator needs the operator extra (kopf, aiohttp, prometheus-client): {exc}",
            file=sys.stderr,
        )
        return 1
    if args.lease_duration < 3:
        print("flashrl operator: --lease-duration must be at least 3 seconds", file=sys.stderr)
        return EXIT_INVALID
    if args.max_concurrent_reconciles < 1:
        print("flashrl operator: --max-concurrent-reconciles must be at least 1", file=sys.stderr)
        return EXIT_INVALID
    if args.verl_check_slots is not None and args.verl_check_slots < 1:
        print("flashrl operator: --verl-check-slots must be at least 1", file=sys.stderr)
        return EXIT_INVALID
    from flashrl_operator.job.policy import AdminPolicy
    from flashrl_operator.render.network import RAY_METRICS_PORT, NetworkSettings

    config = OperatorConfig(
        namespaces=tuple(args.namespace),
        kubeconfig=args.kubeconfig,
        bind_host=args.bind_address,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        default_trainer_image=args.default_trainer_image or None,
        leader_election=args.leader_election,
        lease_duration=args.lease_duration,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        check_slots=args.verl_check_slots,
        check_fit=not args.no_fit_check,
        policy=AdminPolicy(
            allowed_registries=tuple(args.allowed_registry),
            allowed_priority_classes=tuple(args.allowed_priority_class),
            allowed_rdma_resources=tuple(args.allowed_rdma_resource),
            forbid_keyless_exists_tolerations=args.forbid_keyless_exists_tolerations,
        ),
        network=NetworkSettings(
            enabled=not args.no_network_policy,
            kuberay_namespace=args.network_policy_kuberay_namespace,
            monitoring_namespace=args.network_policy_monitoring_namespace,
            metrics_ports=tuple(args.network_policy_metrics_port) or (RAY_METRICS_PORT,),
            egress_cidrs=tuple(args.network_policy_egress_cidr)
            if args.network_policy_restrict_egress
            else None,
        ),
    )
    return run_foreground(config, log_format=args.log_format, verbose=args.verbose)


COMMAND = Command(
    "operator",
    help="run the operator (reconciles FlashRLJobs into KubeRay RayJobs)",
    description=(
        "Run the FlashRL operator in the foreground. Credentials: the pod's service "
        "account when in a cluster, else $KUBECONFIG (or ~/.kube/config) and its current context."
    ),
    arguments=arguments,
    run=run,
)
