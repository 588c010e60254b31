#!/usr/bin/env bash
# get-chromium.sh: make sure Debian's headless-capable Chromium is installed (the report test renders
# the HTML report in it). Installs the `chromium` package only when no chromium is on PATH, after an
# `apt-get update`; a machine that already has it is left untouched.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium is missing and this machine has no apt-get: install Chromium and put it on PATH" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "installing chromium needs root (or sudo)" >&2; exit 1; }
  sudo="sudo"
fi
# fonts-dejavu-core: a font for the page text (matplotlib embeds its own into the plots).
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
chromium --version
