#!/usr/bin/env bash
# .ci/libvirt/teardown.sh: undo what setup.sh did, and only that.
#
# Reads "$WORK/state" (written by setup.sh): stops the daemons setup started, by PID (never by
# name), and removes the network and pool setup defined. Domains whose disks live in that pool
# (left by a failed test run) are destroyed first. Packages stay installed; the work dir keeps
# its logs, the test summary and the kernel package cache.
#   WORK=/var/tmp/egressd-libvirt-e2e
set -uo pipefail

WORK=${WORK:-/var/tmp/egressd-libvirt-e2e}
STATE=$WORK/state
export LIBVIRT_DEFAULT_URI=qemu:///system
say() { echo "[teardown] $*"; }

if [ ! -f "$STATE" ]; then
  say "no $STATE: nothing to undo"
  exit 0
fi
state_get() { sed -n "s/^$1=//p" "$STATE" | tail -n 1; }
alive() {
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] || return 1
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ]
}

POOL=$(state_get pool_defined)
NET=$(state_get net_defined)
virsh_ok=0
virsh -q version >/dev/null 2>&1 && virsh_ok=1

# Domains using the pool setup made: a test that failed half-way may have left some running.
if [ $virsh_ok = 1 ] && [ -n "$POOL" ]; then
  pool_dir=$(virsh -q pool-dumpxml "$POOL" 2>/dev/null | sed -n 's:.*<path>\(.*\)</path>.*:\1:p' | head -n 1)
  if [ -n "$pool_dir" ]; then
    for d in $(virsh -q list --all --name); do
      if virsh -q dumpxml "$d" 2>/dev/null | grep -q "file='$pool_dir/"; then
        say "removing domain $d (its disks are in pool $POOL)"
        virsh -q destroy "$d" >/dev/null 2>&1
        virsh -q undefine "$d" --nvram >/dev/null 2>&1 || virsh -q undefine "$d" >/dev/null 2>&1
      fi
    done
  fi
fi

# The pool: its volumes, its directory, its definition.
if [ $virsh_ok = 1 ] && [ -n "$POOL" ] && virsh -q pool-info "$POOL" >/dev/null 2>&1; then
  virsh -q pool-refresh "$POOL" >/dev/null 2>&1
  for v in $(virsh -q vol-list --pool "$POOL" 2>/dev/null | awk '{print $1}'); do
    virsh -q vol-delete --pool "$POOL" "$v" >/dev/null 2>&1
  done
  virsh -q pool-destroy "$POOL" >/dev/null 2>&1
  virsh -q pool-delete "$POOL" >/dev/null 2>&1
  virsh -q pool-undefine "$POOL" >/dev/null 2>&1 && say "removed pool $POOL"
fi

# The network (destroying it stops its dnsmasq and removes the bridge).
if [ $virsh_ok = 1 ] && [ -n "$NET" ] && virsh -q net-info "$NET" >/dev/null 2>&1; then
  virsh -q net-destroy "$NET" >/dev/null 2>&1
  virsh -q net-undefine "$NET" >/dev/null 2>&1 && say "removed network $NET"
fi

# The daemons, by the PIDs setup recorded, newest first; each checked to still be the same
# program before it is signalled.
for d in sshd:/usr/sbin/sshd libvirtd:/usr/sbin/libvirtd virtlogd:/usr/sbin/virtlogd; do
  name=${d%%:*}
  exe=${d#*:}
  pid=$(state_get "${name}_pid")
  [ -n "$pid" ] || continue
  if alive "$pid" && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ]; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      kill -KILL "$pid" 2>/dev/null
      say "stopped $name (pid $pid) with SIGKILL"
    else
      say "stopped $name (pid $pid)"
    fi
  fi
done

# /dev/kvm back to what it was, if setup changed it.
kvm=$(state_get kvm_mode)
if [ -n "$kvm" ] && [ -c /dev/kvm ]; then
  chown "${kvm% *}" /dev/kvm && chmod "${kvm#* }" /dev/kvm && say "/dev/kvm back to $kvm"
fi

rm -rf "$WORK/ssh" "$WORK/env" "$STATE"
say "done"
