#!/usr/bin/env bash
# Install the Debian packages the test suite needs when they are missing (CI runs as root).
set -o errexit -o pipefail -o nounset

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v redis-server >/dev/null || missing+=(redis-server)
# perf_analyzer (tritonclient 2.48's binary) links against libb64.
ldconfig -p | grep -q 'libb64.so.0d' || missing+=(libb64-0d)
command -v docker-compose >/dev/null || missing+=(docker-compose)

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "Missing system packages: ${missing[*]} (install them with apt-get as root)" >&2
    exit 1
  fi
  echo "Installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
