#!/usr/bin/env bash
# .ci/libvirt/in-ns.sh CMD...: run CMD, as root, in the libvirt end-to-end test's network and
# mount namespaces (made by setup.sh; lib.sh says what they hold), in the current directory.
# For a test run by hand, or a look around after KEEP=1:
#   sudo .ci/libvirt/in-ns.sh virsh list --all
#   sudo .ci/libvirt/in-ns.sh ss -ltnp
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
[ $# -gt 0 ] || { echo "usage: in-ns.sh CMD..." >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "in-ns.sh: must run as root" >&2; exit 1; }
ns_up || { echo "in-ns.sh: no namespace $NETNS (run .ci/libvirt/setup.sh first)" >&2; exit 1; }
exec "${NSENTER[@]}" --wd="$PWD" -- "$@"
