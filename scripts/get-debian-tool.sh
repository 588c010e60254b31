#!/usr/bin/env bash
# get-debian-tool.sh TOOL...: make sure each TOOL's command is on PATH, installing its Debian package(s)
# only when it is missing, after one `apt-get update`; a machine that already has them is left untouched.
#   chromium  Debian's headless-capable Chromium (the report test renders the HTML report in it), with
#             fonts-dejavu-core for the page text (matplotlib embeds its own fonts into the plots).
#   promtool  from Debian's `prometheus` package (the tests check the chart's alert rules and a real
#             scrape of the launcher's /metrics with it), without recommends: promtool only, not the
#             server's web assets and exporters.
set -euo pipefail
usage="usage: $0 chromium|promtool ..."
[ "$#" -gt 0 ] || { echo "$usage" >&2; exit 2; }
missing=()
for tool in "$@"; do
  case "$tool" in
    chromium | promtool) ;;
    *) echo "unknown tool '$tool'; $usage" >&2; exit 2 ;;
  esac
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ "${#missing[@]}" -gt 0 ] || exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "${missing[*]} missing and this machine has no apt-get: install them and put them on PATH" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "installing ${missing[*]} needs root (or sudo)" >&2; exit 1; }
  sudo="sudo"
fi
# `env` so that sudo, which resets the environment, still passes DEBIAN_FRONTEND on to apt-get.
apt_install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
$sudo apt-get update -qq
for tool in "${missing[@]}"; do
  case "$tool" in
    chromium) apt_install chromium fonts-dejavu-core ;;
    promtool) apt_install --no-install-recommends prometheus ;;
  esac
  "$tool" --version
done
