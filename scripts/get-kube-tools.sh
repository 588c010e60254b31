#!/usr/bin/env bash
# get-kube-tools.sh DEST: build the real control plane the integration and e2e tests run, into DEST.
#
#   kube-apiserver, kube-controller-manager, kube-scheduler,
#   kubectl (the client the server's version expects)       from the k8s.io/kubernetes Go module
#   kuberay-operator (KubeRay's own operator)               from github.com/ray-project/kuberay/ray-operator
#   kwok (simulated nodes and pods)                          from sigs.k8s.io/kwok/cmd/kwok
#   etcd                                                     from Debian (etcd-server), when missing
#
# Versions come from images/pins.yaml (versions.kubernetes, versions.kuberay, versions.kwok). Each binary is
# rebuilt only when DEST/.versions says another version was built; the Go module and build caches make a
# rebuild after a version bump cheap.
#
# Why a generated module for Kubernetes: k8s.io/kubernetes replaces its staging modules (k8s.io/api,
# k8s.io/apimachinery, ...) with local paths, so `go install k8s.io/kubernetes/cmd/...@v1.36.x` is refused.
# Projects that embed Kubernetes require it from a module of their own that pins every staging module to
# the matching v0.36.x; this script writes that module from the replace block of the release's own go.mod,
# so the list never goes stale.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.tools/bin}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
pin() { sed -n "s/^  $1: \"\(.*\)\"/\1/p" "$root/images/pins.yaml"; }
k8s=$(pin kubernetes); kuberay=$(pin kuberay); kwok=$(pin kwok)
[ -n "$k8s" ] && [ -n "$kuberay" ] && [ -n "$kwok" ] || { echo "images/pins.yaml lacks versions.kubernetes/kuberay/kwok" >&2; exit 1; }
command -v go >/dev/null || { echo "go (1.26) is needed to build the control plane: https://go.dev/doc/install" >&2; exit 1; }
export GOFLAGS="-buildvcs=false -trimpath" CGO_ENABLED=0 GOTOOLCHAIN=local
stamp=$dest/.versions
want="kubernetes=$k8s kuberay=$kuberay kwok=$kwok"
have() { [ -x "$dest/$1" ] && grep -qx "$1 $2" "$stamp" 2>/dev/null; }
record() { { grep -v "^$1 " "$stamp" 2>/dev/null || true; echo "$1 $2"; } > "$stamp.new"; mv "$stamp.new" "$stamp"; }

# --- Kubernetes control plane ---------------------------------------------------------------------
if ! have kube-apiserver "$k8s" || ! have kube-controller-manager "$k8s" || ! have kube-scheduler "$k8s" ||
  ! have kubectl "$k8s"; then
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  modfile=$(go mod download -json "k8s.io/kubernetes@v$k8s" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  staging=$(python3 - "$k8s" "$modfile" <<'PY'
import re, sys
version, path = sys.argv[1], sys.argv[2]
minor = "v0." + version.split(".", 1)[1]
for module in re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", open(path).read(), re.M):
    print(f"{module} {minor}")
PY
)
  {
    echo "module flashrl.dev/kube-tools"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes v$k8s"
    echo
    echo "replace ("
    while read -r module version; do echo "	$module => $module $version"; done <<<"$staging"
    echo ")"
  } > "$work/go.mod"
  (cd "$work" && go mod download k8s.io/kubernetes && go get "k8s.io/kubernetes/cmd/kube-apiserver@v$k8s" >/dev/null 2>&1 || true)
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    have "$cmd" "$k8s" && continue
    echo "building $cmd v$k8s (once; several minutes on 2 cores)" >&2
    minor=${k8s#*.}; minor=${minor%%.*}
    (cd "$work" && GOFLAGS="$GOFLAGS -mod=mod" go build -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$k8s -X k8s.io/component-base/version.gitMajor=${k8s%%.*} -X k8s.io/component-base/version.gitMinor=$minor" -o "$dest/$cmd" "k8s.io/kubernetes/cmd/$cmd")
    record "$cmd" "$k8s"
  done
fi

# --- KubeRay's operator and kwok (plain modules: go install works) ---------------------------------
if ! have kuberay-operator "$kuberay"; then
  echo "building KubeRay's operator v$kuberay" >&2
  GOBIN="$dest/.gobin" go install -ldflags "-s -w" "github.com/ray-project/kuberay/ray-operator@v$kuberay"
  mv "$dest/.gobin/ray-operator" "$dest/kuberay-operator"; rmdir "$dest/.gobin"
  record kuberay-operator "$kuberay"
fi
if ! have kwok "$kwok"; then
  echo "building kwok v$kwok" >&2
  GOBIN="$dest/.gobin" go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$kwok"
  mv "$dest/.gobin/kwok" "$dest/kwok"; rmdir "$dest/.gobin"
  record kwok "$kwok"
fi

# --- etcd: Debian's, as the API server's store ------------------------------------------------------
if ! command -v etcd >/dev/null && [ ! -x "$dest/etcd" ]; then
  bash "$root/scripts/get-debian-tool.sh" etcd
fi
echo "$want" >&2
