# shellcheck shell=bash
# .ci/libvirt/lib.sh: sourced by the scripts here. The test's namespaces, its state file, and
# the check that nothing of the test shows on the host's own network stack.
#
# Everything of the test runs in one network namespace, $NETNS, made with `ip netns add`:
# libvirtd, virtlogd, libvirt's dnsmasq, the QEMU guests (their tap devices and the bridge are
# created there), sshd, and the Go test with every egressd, nats-server and curl it starts.
# The only link in it is its own loopback; no veth leads out, so no packet of the test can
# reach the host's stack and no forwarding or NAT is involved.
#
# Those processes also share one persistent mount namespace ($MNTNS, bind-mounted on a file)
# in which
#   /sys               is a sysfs of $NETNS (what `ip netns exec` does: libvirt reads the
#                      bridge and tap devices there), with the host's /sys/fs/cgroup moved in;
#   /run/libvirt       is a tmpfs: libvirtd's and virtlogd's sockets, pid files and runtime
#                      state are the test's alone (a host libvirtd, if any, keeps its own and
#                      never sees these; no host process can connect to them);
#   /etc/libvirt       is $ROOT/etc, a copy of the host's config without any defined network,
#                      pool or domain (so no `default` network autostarts in the namespace);
#   /var/lib/libvirt   is $ROOT/lib (the pool, dnsmasq's leases, QEMU's state);
#   /var/log/libvirt   is $WORK/logs/libvirt (QEMU and serial console logs, kept after
#                      teardown for a failed run's diagnosis).
# A separate `ip netns exec` per command would give each its own mount namespace, so these
# could not be shared; in_ns enters both namespaces instead.

# shellcheck disable=SC2034 # the scripts that source this file use them
WORK=${WORK:-/var/tmp/egressd-libvirt-e2e}
NETNS=egressd-e2e
NSDIR=/run/egressd-e2e # a private mount point holding the mount namespace's file
MNTNS=$NSDIR/mnt
ROOT=$WORK/ns
BRIDGE=virbr-egr
STATE=$WORK/state

# state_get KEY prints the recorded value; state_set KEY VALUE records one (last wins).
state_get() { [ -f "$STATE" ] && sed -n "s/^$1=//p" "$STATE" | tail -n 1; }
state_set() { touch "$STATE"; sed -i "/^$1=/d" "$STATE"; echo "$1=$2" >>"$STATE"; }

# alive PID: the process exists and is not a zombie (PID 1 here never reaps orphans).
alive() {
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] || return 1
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ]
}

# exe_of PID prints the executable of a live process.
exe_of() { readlink "/proc/$1/exe" 2>/dev/null || true; }

# ns_up: the namespaces exist (with the test's netns and its mount namespace ready).
ns_up() { [ -e "/run/netns/$NETNS" ] && mountpoint -q "$MNTNS" 2>/dev/null; }

# netns_id prints the namespace's identity as /proc/PID/ns/net shows it: net:[inode].
netns_id() { echo "net:[$(stat -L -c %i "/run/netns/$NETNS")]"; }

# in_netns PID: the process lives in the test's network namespace.
in_netns() { [ "$(readlink "/proc/$1/ns/net" 2>/dev/null)" = "$(netns_id)" ]; }

# ours PID EXE: a live process of the test: that program, in the test's namespace.
ours() { alive "$1" && [ "$(exe_of "$1")" = "$2" ] && in_netns "$1"; }

# in_ns CMD...: run CMD in the test's network and mount namespaces, in the current directory.
# NSENTER is the prefix for `"${NSENTER[@]}" [--wd=DIR] -- CMD &`, whose $! is CMD's PID
# (nsenter execs it; a backgrounded function would leave a subshell in between). Without --wd
# nsenter starts CMD in /.
NSENTER=(nsenter --net="/run/netns/$NETNS" --mount="$MNTNS")
in_ns() { "${NSENTER[@]}" --wd="$PWD" -- "$@"; }

# vsh ARGS...: virsh on the test's libvirtd (the only one reachable in its mount namespace).
vsh() { in_ns virsh -q -c qemu:///system "$@"; }

# ns_pids prints every process in the test's network or mount namespace.
ns_pids() {
  local mnt
  mnt=$(stat -L -c %i "$MNTNS" 2>/dev/null) || mnt=
  {
    [ -e "/run/netns/$NETNS" ] && ip netns pids "$NETNS" 2>/dev/null
    [ -n "$mnt" ] && find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/mnt' -lname "mnt:\[$mnt\]" 2>/dev/null | cut -d/ -f3
  } | sort -un
}

# host_violations prints one line for each thing of the test that shows on the host's network
# stack (nothing when all is well), and one when the test's own side is not what it should be,
# so that the check cannot pass because nothing is running:
#   - the bridge $BRIDGE on the host (and, as the counter-check, not in the namespace);
#   - a host link with the MAC of one of the namespace's links (the guests' tap devices);
#   - a listening TCP or UDP socket on the host owned by a process of the namespace;
#   - a host firewall rule naming the bridge;
#   - a process of the test outside the namespace: the daemons setup recorded, the dnsmasq
#     libvirt runs for the network, and every descendant of PID $1 when given (the go test).
host_violations() {
  local root=${1:-} p pids macs m
  ip link show dev "$BRIDGE" >/dev/null 2>&1 && echo "bridge $BRIDGE exists on the host"
  in_ns ip link show dev "$BRIDGE" >/dev/null 2>&1 || echo "bridge $BRIDGE is missing in namespace $NETNS"
  macs=$(ip -o link | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
  for m in $(in_ns ip -o link | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p'); do
    grep -qx "$m" <<<"$macs" && echo "a host link has MAC $m of a link in namespace $NETNS: $(ip -o link | grep "$m" | cut -d' ' -f2)"
  done
  pids=$(ns_pids)
  local listen
  listen=$(ss -Hltunp 2>/dev/null)
  for p in $pids; do
    grep -q "pid=$p," <<<"$listen" && echo "host socket of pid $p ($(exe_of "$p")): $(grep "pid=$p," <<<"$listen" | head -n 1)"
  done
  if command -v nft >/dev/null && nft list ruleset 2>/dev/null | grep -q "$BRIDGE"; then
    echo "a host nftables rule names $BRIDGE"
  fi
  if command -v iptables-save >/dev/null && iptables-save 2>/dev/null | grep -q "$BRIDGE"; then
    echo "a host iptables rule names $BRIDGE"
  fi
  local want=()
  for k in virtlogd_pid libvirtd_pid sshd_pid; do
    p=$(state_get $k)
    alive "$p" && want+=("$p:${k%_pid}")
  done
  p=$(in_ns cat /run/libvirt/network/egressd-e2e.pid 2>/dev/null)
  alive "$p" && want+=("$p:dnsmasq")
  if [ -n "$root" ]; then
    # Descendants of root, from one ps listing (a process that exits meanwhile is skipped).
    local tree
    tree=$(ps -e -o pid=,ppid= | awk -v r="$root" '{c[$2] = c[$2] " " $1} END {n = split(r, q, " "); while (n > 0) {x = q[n--]; print x; m = split(c[x], k, " "); for (i = 1; i <= m; i++) q[++n] = k[i]}}')
    for p in $tree; do alive "$p" && want+=("$p:$(exe_of "$p")"); done
  fi
  for p in "${want[@]}"; do # alive again after the check: a process that just exited is no finding
    ! in_netns "${p%%:*}" && alive "${p%%:*}" && echo "pid ${p%%:*} (${p#*:}) runs outside namespace $NETNS"
  done
  return 0
}
