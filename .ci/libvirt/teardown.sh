#!/usr/bin/env bash
# .ci/libvirt/teardown.sh: undo what setup.sh did, and only that.
#
# Destroys the guests and the network while the test's libvirtd answers, stops the daemons
# setup recorded in "$WORK/state" (by PID, each checked to be the same program), then every
# other process left in the test's namespaces (a QEMU, dnsmasq, an egressd of a killed test
# run), by PID, and removes the mount namespace and the network namespace: the bridge and the
# tap devices exist only there and go with it. Last it checks that nothing of the test is left
# on the host. Safe to run twice, after a failed or cut-off run, and with no state file at all.
# Packages stay installed; the work dir keeps its logs (libvirt's and QEMU's under
# logs/libvirt), the test summary and the kernel package cache.
#   WORK=/var/tmp/egressd-libvirt-e2e
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
say() { echo "[teardown] $*"; }
[ "$(id -u)" -eq 0 ] || { echo "teardown.sh: must run as root" >&2; exit 1; }

# gone N PID...: wait up to N tenths of a second for every PID to go; LEFT holds the rest.
gone() {
  local n=$1 p
  shift
  for _ in $(seq 1 "$n"); do
    LEFT=()
    for p in "$@"; do alive "$p" && LEFT+=("$p"); done
    [ ${#LEFT[@]} -eq 0 ] && return 0
    sleep 0.1
  done
  return 1
}

# stop PID...: SIGTERM, up to 10 s for all of them to go, then SIGKILL for the rest.
stop() {
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null
  gone 100 "$@" && return 0
  say "SIGKILL for ${LEFT[*]}"
  kill -KILL "${LEFT[@]}" 2>/dev/null
  gone 50 "$@"
}

# Guests and network, cleanly, while libvirtd answers. Every domain, network and pool this
# libvirtd knows is the test's: its /etc/libvirt is the namespace's own copy.
if ns_up && vsh version >/dev/null 2>&1; then
  for d in $(vsh list --all --name); do
    say "removing domain $d"
    vsh destroy "$d" >/dev/null 2>&1
    vsh undefine "$d" --nvram >/dev/null 2>&1 || vsh undefine "$d" >/dev/null 2>&1
  done
  for n in $(vsh net-list --name); do vsh net-destroy "$n" >/dev/null 2>&1 && say "stopped network $n"; done
  for p in $(vsh pool-list --name); do vsh pool-destroy "$p" >/dev/null 2>&1 && say "stopped pool $p"; done
fi

# The daemons, by the PIDs setup recorded, newest first; each checked to still be the same
# program before it is signalled (a PID of an earlier boot may be anything now).
for d in sshd:/usr/sbin/sshd libvirtd:/usr/sbin/libvirtd virtlogd:/usr/sbin/virtlogd; do
  name=${d%%:*}
  pid=$(state_get "${name}_pid")
  if [ -n "$pid" ] && alive "$pid" && [ "$(exe_of "$pid")" = "${d#*:}" ]; then
    stop "$pid"
    say "stopped $name (pid $pid)"
  fi
done

# Everything else in the namespaces: only the test's processes are there. In rounds, because
# a process may start another as it is stopped (a test binary's last virsh, say); a namespace
# deleted under a live process would live on, nameless, until it exits.
for _ in 1 2 3 4 5; do
  mapfile -t rest < <(ns_pids)
  [ ${#rest[@]} -gt 0 ] || break
  say "stopping what is left in namespace $NETNS: $(for p in "${rest[@]}"; do printf '%s(%s) ' "$p" "$(basename "$(exe_of "$p")")"; done)"
  stop "${rest[@]}"
done
rc=0
mapfile -t rest < <(ns_pids)
[ ${#rest[@]} -eq 0 ] || { say "still running in namespace $NETNS: ${rest[*]}"; rc=1; }

# The namespaces. The mount namespace's file, then its private mount point; then the network
# namespace, which the kernel frees (with its bridge, tap devices and firewall) once its last
# process is gone.
if mountpoint -q "$MNTNS" 2>/dev/null; then
  umount "$MNTNS" && say "removed mount namespace $MNTNS"
fi
rm -f "$MNTNS"
if mountpoint -q "$NSDIR" 2>/dev/null; then umount "$NSDIR"; fi
[ -d "$NSDIR" ] && rmdir "$NSDIR"
if [ -e "/run/netns/$NETNS" ]; then
  ip netns del "$NETNS" && say "removed network namespace $NETNS"
fi

# /dev/kvm back to what it was, if setup changed it.
kvm=$(state_get kvm_mode)
if [ -n "$kvm" ] && [ -c /dev/kvm ]; then
  chown "${kvm% *}" /dev/kvm && chmod "${kvm#* }" /dev/kvm && say "/dev/kvm back to $kvm"
fi

rm -rf "$ROOT" "$WORK/ssh" "$WORK/env" "$STATE"

# Nothing of the test is left on the host.
ip netns list 2>/dev/null | grep -qw "$NETNS" && { say "network namespace $NETNS is still there"; rc=1; }
ip link show dev "$BRIDGE" >/dev/null 2>&1 && { say "bridge $BRIDGE exists on the host"; rc=1; }
mountpoint -q "$MNTNS" 2>/dev/null && { say "$MNTNS is still mounted"; rc=1; }
[ $rc -eq 0 ] && say "done: no namespace, no bridge, no process of the test left"
exit $rc
