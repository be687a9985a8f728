#!/usr/bin/env bash
# Install Debian's Ceph (Pacific 16.2.x) daemons + CLI + fio, without leaving
# any service running. Idempotent: a second run only prints the version.
set -euo pipefail

PKGS=(ceph-mon ceph-osd ceph-mgr ceph-common fio)
export DEBIAN_FRONTEND=noninteractive

if [[ $EUID -ne 0 ]]; then
    echo "install.sh: must run as root (apt-get install)" >&2
    exit 1
fi

# pids of ceph daemons that were already running before we started: never touched.
ceph_daemon_pids() {
    local p comm
    for p in /proc/[0-9]*; do
        comm=$(cat "$p/comm" 2>/dev/null) || continue
        case "$comm" in
            ceph-mon|ceph-osd|ceph-mgr|ceph-mds|ceph-crash|radosgw|ceph-volume*) echo "${p#/proc/}" ;;
        esac
    done
}
before=" $(ceph_daemon_pids | tr '\n' ' ') "

all_installed() {
    local p
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || return 1
    done
}

start=$(date +%s)
if all_installed; then
    echo "install.sh: ${PKGS[*]} already installed"
else
    # Forbid maintainer scripts from starting services (invoke-rc.d honours
    # policy-rc.d; there is no systemd here, so deb-systemd-invoke is a no-op).
    created_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        created_policy=1
    fi
    cleanup_policy() { [[ $created_policy -eq 1 ]] && rm -f /usr/sbin/policy-rc.d; return 0; }
    trap cleanup_policy EXIT

    if ! apt-get install -y --no-install-recommends "${PKGS[@]}"; then
        echo "install.sh: apt-get install failed; running apt-get update and retrying" >&2
        apt-get update
        apt-get install -y --no-install-recommends "${PKGS[@]}"
    fi
    echo "install.sh: installed in $(( $(date +%s) - start )) s"
fi

# Make sure the packages left nothing running (only pids that are new).
for pid in $(ceph_daemon_pids); do
    if [[ "$before" != *" $pid "* ]]; then
        echo "install.sh: stopping ceph daemon pid $pid ($(cat /proc/$pid/comm 2>/dev/null)) started by package install" >&2
        kill -TERM "$pid" 2>/dev/null || true
    fi
done

ceph --version
