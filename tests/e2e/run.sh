#!/usr/bin/env bash
# kind e2e for FlashRL (`make e2e`): a real API server, the pinned KubeRay, our chart and images.
#
#   1. create a kind cluster (tests/e2e/kind-config.yaml, node image from images/pins.yaml) with one fake
#      H20 node (label, taint, and an nvidia.com/gpu capacity patched onto its status);
#   2. build the operator image and the CPU stand-in trainer image (images/build.py) and load them;
#   3. install KubeRay (pinned version) and the flashrl-operator chart, then `helm test` it;
#   4. apply tests/e2e/flashrljob-e2e.yaml (a dry run) and wait for phase Succeeded.
#
# Every wait has a deadline and says what it waits for. On failure it dumps the operator's and KubeRay's
# logs, events and object states. The cluster is deleted on exit unless KEEP_CLUSTER=1.
#
# Needs: docker (with a running daemon), kind, kubectl, python3 with PyYAML (the project's .venv works),
# and helm (PATH or .tools/bin; `make tools`).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
E2E_DIR="${REPO}/tests/e2e"
CLUSTER_NAME="${CLUSTER_NAME:-flashrl-e2e}"
KEEP_CLUSTER="${KEEP_CLUSTER:-0}"
OPERATOR_NS="flashrl-system"
KUBERAY_NS="kuberay-system"
JOB_FILE="${E2E_DIR}/flashrljob-e2e.yaml"
JOB_TIMEOUT_SECONDS="${JOB_TIMEOUT_SECONDS:-1200}"
export PATH="${REPO}/.tools/bin:${REPO}/.venv/bin:${PATH}"

log() { printf '[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

for tool in docker kind kubectl helm python3; do
  command -v "${tool}" >/dev/null || die "${tool} is not installed (see the header of tests/e2e/run.sh)"
done
docker info >/dev/null 2>&1 || die "the docker daemon is not reachable"

# pin KEY: one value from images/pins.yaml (the only record of versions and image references).
pin() {
  python3 - "${REPO}/images/pins.yaml" "$1" <<'PY'
import sys, yaml
node = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
for part in sys.argv[2].split("."):
    node = node[part]
print(node)
PY
}

KIND_VERSION="$(pin e2e.kind)"
NODE_IMAGE="$(pin e2e.kind_node.repository):$(pin e2e.kind_node.tag)@$(pin e2e.kind_node.digest)"
KUBERAY_VERSION="$(pin versions.kuberay)"
JOB_NS="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"]["namespace"])' "${JOB_FILE}")"
JOB_NAME="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"]["name"])' "${JOB_FILE}")"

kind version | grep -q "v${KIND_VERSION} " \
  || die "kind v${KIND_VERSION} is pinned (images/pins.yaml e2e.kind); found: $(kind version)"

dump_state() {
  log "---- diagnostics ----"
  kubectl get nodes -o wide || true
  kubectl get flashrljobs,rayjobs,rayclusters,jobs,pods -A -o wide || true
  kubectl get flashrljob "${JOB_NAME}" -n "${JOB_NS}" -o yaml || true
  kubectl get rayjobs -n "${JOB_NS}" -o yaml || true
  kubectl get events -A --sort-by=.lastTimestamp | tail -n 80 || true
  log "---- operator logs ----"
  kubectl logs -n "${OPERATOR_NS}" -l app.kubernetes.io/name=flashrl-operator --all-containers --tail=300 || true
  log "---- KubeRay logs ----"
  kubectl logs -n "${KUBERAY_NS}" -l app.kubernetes.io/name=kuberay-operator --tail=200 || true
  log "---- Ray pods (head, worker, submitter) ----"
  for pod in $(kubectl get pods -n "${JOB_NS}" -o name 2>/dev/null); do
    log "${pod}"
    kubectl logs -n "${JOB_NS}" "${pod}" --all-containers --tail=100 || true
  done
}

cleanup() {
  local rc=$?
  if [[ ${rc} -ne 0 ]]; then
    dump_state
  fi
  if [[ "${KEEP_CLUSTER}" == "1" ]]; then
    log "KEEP_CLUSTER=1: cluster ${CLUSTER_NAME} kept (kind delete cluster --name ${CLUSTER_NAME})"
  else
    log "deleting cluster ${CLUSTER_NAME}"
    kind delete cluster --name "${CLUSTER_NAME}" || true
  fi
  exit "${rc}"
}

# wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND...: run COMMAND until it succeeds or the deadline passes.
# COMMAND itself blocks (kubectl wait with a short --timeout), so the loop never sleeps blindly.
wait_for() {
  local what=$1 timeout=$2
  shift 2
  local deadline=$((SECONDS + timeout))
  log "waiting up to ${timeout}s for ${what}"
  until "$@"; do
    ((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for ${what}"
    log "still waiting for ${what} ($((deadline - SECONDS))s left)"
  done
}

log "creating kind cluster ${CLUSTER_NAME} (${NODE_IMAGE})"
trap cleanup EXIT
kind create cluster --name "${CLUSTER_NAME}" --config "${E2E_DIR}/kind-config.yaml" --image "${NODE_IMAGE}" --wait 300s
kubectl config use-context "kind-${CLUSTER_NAME}" >/dev/null

# With a worker present kind taints the control plane; the operators and the Ray head run there.
CONTROL_PLANE="$(kubectl get nodes -l node-role.kubernetes.io/control-plane -o jsonpath='{.items[0].metadata.name}')"
if kubectl get node "${CONTROL_PLANE}" -o jsonpath='{.spec.taints[*].key}' | grep -q node-role.kubernetes.io/control-plane; then
  kubectl taint node "${CONTROL_PLANE}" node-role.kubernetes.io/control-plane:NoSchedule-
fi

GPU_NODE="$(kubectl get nodes -l nvidia.com/gpu.product=NVIDIA-H20 -o jsonpath='{.items[0].metadata.name}')"
[[ -n "${GPU_NODE}" ]] || die "no node carries nvidia.com/gpu.product=NVIDIA-H20 (kind-config.yaml)"
log "advertising one fake nvidia.com/gpu on ${GPU_NODE}"
kubectl patch node "${GPU_NODE}" --subresource=status --type=json \
  -p '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "1"}]'
wait_for "nvidia.com/gpu to be allocatable on ${GPU_NODE}" 60 \
  kubectl wait node "${GPU_NODE}" --for=jsonpath='{.status.allocatable.nvidia\.com/gpu}'=1 --timeout=10s

log "building images from images/pins.yaml"
python3 "${REPO}/images/build.py" operator
python3 "${REPO}/images/build.py" trainer-cpu
OPERATOR_IMAGE="$(pin images.operator.repository):$(pin images.operator.tag)"
TRAINER_CPU_IMAGE="$(pin images.trainer.repository):$(pin images.trainer.tag)-cpu"
grep -q "trainer: ${TRAINER_CPU_IMAGE}\$" "${JOB_FILE}" || die "${JOB_FILE} must use ${TRAINER_CPU_IMAGE}"
kind load docker-image --name "${CLUSTER_NAME}" "${OPERATOR_IMAGE}" "${TRAINER_CPU_IMAGE}"

log "installing KubeRay ${KUBERAY_VERSION}"
helm repo add kuberay https://ray-project.github.io/kuberay-helm/ --force-update >/dev/null
helm install kuberay-operator kuberay/kuberay-operator --version "${KUBERAY_VERSION}" \
  --namespace "${KUBERAY_NS}" --create-namespace --wait --timeout 5m
wait_for "the RayJob CRD to be established" 60 \
  kubectl wait crd/rayjobs.ray.io --for=condition=Established --timeout=10s

log "installing the flashrl-operator chart"
helm install flashrl "${REPO}/charts/flashrl-operator" --namespace "${OPERATOR_NS}" --create-namespace \
  --set logFormat=plain --wait --timeout 5m
wait_for "the FlashRLJob CRD to be established" 60 \
  kubectl wait crd/flashrljobs.flashrl.dev --for=condition=Established --timeout=10s
helm test flashrl --namespace "${OPERATOR_NS}" --timeout 3m

log "submitting ${JOB_FILE}"
flashrl validate "${JOB_FILE}"
kubectl create namespace "${JOB_NS}"
kubectl apply -f "${JOB_FILE}"

# The job is done when its phase is terminal; Failed ends the wait at once, with the reason.
job_phase() { kubectl get flashrljob "${JOB_NAME}" -n "${JOB_NS}" -o jsonpath='{.status.phase}' 2>/dev/null || true; }
job_finished() {
  kubectl wait flashrljob "${JOB_NAME}" -n "${JOB_NS}" --for=jsonpath='{.status.phase}'=Succeeded --timeout=15s >/dev/null 2>&1 && return 0
  local phase
  phase="$(job_phase)"
  if [[ "${phase}" == "Failed" ]]; then
    die "FlashRLJob ${JOB_NAME} failed: $(kubectl get flashrljob "${JOB_NAME}" -n "${JOB_NS}" \
      -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}')"
  fi
  log "FlashRLJob ${JOB_NAME} phase: ${phase:-<none yet>}"
  return 1
}
wait_for "FlashRLJob ${JOB_NAME} to succeed" "${JOB_TIMEOUT_SECONDS}" job_finished
log "FlashRLJob ${JOB_NAME} succeeded"
kubectl get flashrljob "${JOB_NAME}" -n "${JOB_NS}" -o wide
