#!/usr/bin/env bash
# get-kube-tools.sh [DEST]: the real control plane the integration and e2e tests run, built from Go modules.
#
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl   k8s.io/kubernetes (versions.kubernetes)
#   kuberay-operator (KubeRay's own operator) and its CRDs             github.com/ray-project/kuberay/ray-operator
#                                                                      (e2e.kuberay_operator)
#   kwok (simulated nodes and pods)                                    sigs.k8s.io/kwok/cmd/kwok (versions.kwok)
#   kueue (Kueue's manager) and its CRDs and webhook manifests            sigs.k8s.io/kueue/cmd/kueue (versions.kueue)
#   the Prometheus Operator's CRDs (chart tests)                       github.com/prometheus-operator/prometheus-operator
#                                                                      (versions.prometheus_operator)
#   etcd (the API server's store)                                      go.etcd.io/etcd/server/v3 (versions.etcd)
#
# Versions come from images/pins.yaml. Binaries are built once per version into a per-machine cache
# (FLASHRL_TOOLS_CACHE, default ~/.cache/flashrl-k8s/tools) and linked into DEST (default .tools/bin), so a
# fresh clone on a machine that built them before links them in seconds. The CRD folders are linked into
# .tools/crds/ (and kwok's stage definitions into .tools/kwok-stages) from the Go module cache, where
# `go mod download` put them.
#
# Why a generated module for Kubernetes: k8s.io/kubernetes replaces its staging modules (k8s.io/api,
# k8s.io/apimachinery, ...) with local paths, so `go install k8s.io/kubernetes/cmd/...@v1.36.x` is refused.
# Projects that embed Kubernetes require it from a module of their own that pins every staging module to
# the matching v0.36.x; this script writes that module from the replace block of the release's own go.mod,
# so the list never goes stale. etcd likewise: its root module replaces its sibling modules with local
# paths, so a generated module requires the server module (whose own requirements pin the siblings) and
# its main calls etcdmain.Main, as etcd's own main does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.tools/bin}
mkdir -p "$dest" "$root/.tools/crds"
dest=$(cd "$dest" && pwd)
pin() { sed -n "s/^  $1: \"\(.*\)\"/\1/p" "$root/images/pins.yaml"; }
k8s=$(pin kubernetes); kuberay=$(pin kuberay_operator); kwok=$(pin kwok); promop=$(pin prometheus_operator)
etcd=$(pin etcd); kueue=$(pin kueue)
for v in k8s kuberay kwok promop etcd kueue; do
  [ -n "${!v}" ] || { echo "images/pins.yaml lacks the version for $v" >&2; exit 1; }
done
command -v go >/dev/null || { echo "go (1.26) is needed to build the control plane: https://go.dev/doc/install" >&2; exit 1; }
export GOFLAGS="-buildvcs=false -trimpath" CGO_ENABLED=0 GOTOOLCHAIN=local
cache=${FLASHRL_TOOLS_CACHE:-$HOME/.cache/flashrl-k8s/tools}
mkdir -p "$cache"
link() { ln -sfn "$1" "$2"; }
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
built() { [ -x "$cache/$1-$2/$1" ]; }

# --- Kubernetes: the control plane and kubectl ---------------------------------------------------------
k8s_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
todo=()
for cmd in "${k8s_cmds[@]}"; do built "$cmd" "$k8s" || todo+=("$cmd"); done
if [ "${#todo[@]}" -gt 0 ]; then
  work=$scratch/kube-tools; mkdir "$work"
  modfile=$(go mod download -json "k8s.io/kubernetes@v$k8s" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  {
    printf 'module flashrl.dev/kube-tools\n\ngo 1.26\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$k8s"
    python3 - "$k8s" "$modfile" <<'PY'
import re, sys
version, path = sys.argv[1], sys.argv[2]
minor = "v0." + version.split(".", 1)[1]
for module in re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", open(path).read(), re.M):
    print(f"\t{module} => {module} {minor}")
PY
    printf ')\n'
  } > "$work/go.mod"
  minor=${k8s#*.}; minor=${minor%%.*}
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$k8s -X k8s.io/component-base/version.gitMajor=${k8s%%.*} -X k8s.io/component-base/version.gitMinor=$minor"
  for cmd in "${todo[@]}"; do
    echo "building $cmd v$k8s (once per machine; the first takes 10-20 minutes on 2 cores)" >&2
    mkdir -p "$cache/$cmd-$k8s"
    (cd "$work" && GOFLAGS="$GOFLAGS -mod=mod" go build -ldflags "$ldflags" -o "$cache/$cmd-$k8s/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
    mv "$cache/$cmd-$k8s/$cmd.tmp" "$cache/$cmd-$k8s/$cmd"
  done
fi
for cmd in "${k8s_cmds[@]}"; do link "$cache/$cmd-$k8s/$cmd" "$dest/$cmd"; done

# --- KubeRay's operator and kwok (plain modules: go install works) --------------------------------------
install_module() { # NAME VERSION PACKAGE BINARY
  if ! built "$1" "$2"; then
    echo "building $1 v$2" >&2
    mkdir -p "$cache/$1-$2"
    GOBIN="$cache/$1-$2" go install -ldflags "-s -w" "$3@v$2"
    [ "$4" = "$1" ] || mv "$cache/$1-$2/$4" "$cache/$1-$2/$1"
  fi
  link "$cache/$1-$2/$1" "$dest/$1"
}
install_module kuberay-operator "$kuberay" github.com/ray-project/kuberay/ray-operator ray-operator
install_module kwok "$kwok" sigs.k8s.io/kwok/cmd/kwok kwok
# Kueue's manager (one ~90 MB binary; the slowest of these builds after the control plane's).
install_module kueue "$kueue" sigs.k8s.io/kueue/cmd/kueue kueue

# --- CRDs the tests read, where `go mod download` put them -----------------------------------------------
module_dir() { go mod download -json "$1@v$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }
link "$(module_dir github.com/ray-project/kuberay/ray-operator "$kuberay")/config/crd/bases" "$root/.tools/crds/kuberay"
link "$(module_dir github.com/prometheus-operator/prometheus-operator "$promop")/example/prometheus-operator-crd" \
  "$root/.tools/crds/prometheus-operator"
# kwok's own stage definitions (how nodes and pods move through their lifecycle), given to kwok by the e2e.
link "$(module_dir sigs.k8s.io/kwok "$kwok")/kustomize/stage" "$root/.tools/kwok-stages"

# Kueue's CRDs and its admission webhooks' manifests (the e2e points the webhooks at its loopback server).
kueue_dir=$(module_dir sigs.k8s.io/kueue "$kueue")
link "$kueue_dir/config/components/crd/bases" "$root/.tools/crds/kueue"
link "$kueue_dir/config/components/webhook" "$root/.tools/kueue-webhook"

# --- etcd: the API server's store -----------------------------------------------------------------------
# 3.6, the line Kubernetes 1.36 is tested with: it answers the watch-progress requests the API server needs
# to serve client-go's streaming lists (kwok's and KubeRay's informers ask for them).
if ! built etcd "$etcd"; then
  echo "building etcd v$etcd" >&2
  work=$scratch/etcd; mkdir "$work"
  printf 'module flashrl.dev/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$etcd" > "$work/go.mod"
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' \
    > "$work/main.go"
  mkdir -p "$cache/etcd-$etcd"
  (cd "$work" && go mod tidy && go build -ldflags "-s -w" -o "$cache/etcd-$etcd/etcd.tmp" .)
  mv "$cache/etcd-$etcd/etcd.tmp" "$cache/etcd-$etcd/etcd"
fi
link "$cache/etcd-$etcd/etcd" "$dest/etcd"
echo "kubernetes v$k8s, etcd v$etcd, KubeRay's operator v$kuberay, kwok v$kwok, Kueue v$kueue," \
  "Prometheus Operator CRDs v$promop: $dest" >&2
