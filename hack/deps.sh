#!/usr/bin/env bash
# make deps: installs the Debian packages the local cluster and the rules tests need, when
# missing: etcd-server (etcd) and prometheus (prometheus, promtool). Used by `make demo` and
# .ci/run. Runs apt-get as root, through sudo when not root.
set -euo pipefail
need=()
command -v etcd >/dev/null || need+=(etcd-server)
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  need+=(prometheus)
fi
[ ${#need[@]} -eq 0 ] && exit 0
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root or sudo to install: ${need[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "deps: installing ${need[*]}"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian's prometheus package starts a service on :9090 where systemd runs; gpufrac's local
# cluster and tests start their own Prometheus on a free port, so it does not get in the way.
