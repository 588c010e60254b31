#!/usr/bin/env bash
# get-promtool.sh: make sure promtool is installed (the tests check the chart's alert rules and a real
# scrape of the launcher's /metrics with it). It comes from Debian's `prometheus` package, installed only
# when no promtool is on PATH, after an `apt-get update`; a machine that already has it is left untouched.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "promtool is missing and this machine has no apt-get: install Prometheus's promtool and put it on PATH" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "installing promtool needs root (or sudo)" >&2; exit 1; }
  sudo="sudo"
fi
$sudo apt-get update -qq
# --no-install-recommends: promtool only, without the server's web assets and exporters.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
promtool --version
