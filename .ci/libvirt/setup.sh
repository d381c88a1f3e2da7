#!/usr/bin/env bash
# .ci/libvirt/setup.sh: prepare this machine for the libvirt end-to-end test.
#
# For a Debian 12 machine, run as root, with or without systemd (nothing here uses an init
# system). On the host it installs libvirt, QEMU, sshd and the guest-image tools from Debian's
# packages and fetches the guest's kernel package (the namespace has no way out, so nothing in
# it can download). Then it makes the test's network namespace and mount namespace (lib.sh
# says what they hold) and, inside them only, starts virtlogd, libvirtd and an sshd on the
# namespace's 127.0.0.1 by hand, and defines an isolated libvirt network (bridge, DHCP, no
# forwarding) and a dir storage pool. Last it checks that none of it shows on the host's
# network stack. Everything the test needs is written to "$WORK/env" (KEY=value lines,
# shell-sourceable).
#
# Idempotent: a second run reuses the namespaces and what already runs in them. What this
# script starts or changes is recorded in "$WORK/state" for teardown.sh; a half-made namespace
# from an interrupted run is torn down and made again.
#
#   WORK=/var/tmp/egressd-libvirt-e2e   work dir (ssh keys, logs, env and state files)
#   SSH_PORT=2222                       first port tried for sshd on the namespace's 127.0.0.1
#   SKIP_APT=1                          do not run apt-get (packages already installed)
#   EGRESSD_LIBVIRT_GUEST_KERNEL=cloud  the guest kernel flavour to fetch (cloud or generic)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

SSH_PORT=${SSH_PORT:-2222}
NET=egressd-e2e
BRIDGE_IP=192.168.124.1
POOL=egressd-e2e
POOL_DIR=/var/lib/libvirt/egressd-e2e-pool # in the namespace's private /var/lib/libvirt
SOCKET=/var/run/libvirt/libvirt-sock         # in the namespace's private /run/libvirt

START=${EPOCHREALTIME/./}
say() {
  local ms=$(((${EPOCHREALTIME/./} - START) / 1000))
  printf '[setup +%d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"
}
die() { echo "setup.sh: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
mkdir -p "$WORK"
chmod 0755 "$WORK"
touch "$STATE"

# A namespace left half-made (setup cut off before the mount namespace existed) is torn down
# first, with everything recorded for it, and made again below.
if ! ns_up && { [ -e "/run/netns/$NETNS" ] || [ -e "$MNTNS" ]; }; then
  say "a half-made namespace $NETNS is left from an earlier run: tearing it down first"
  WORK=$WORK "$HERE/teardown.sh"
  touch "$STATE"
fi

# ------------------------------------------------------------------------------------ packages
# libvirt-daemon-system-sysv is named explicitly: without it apt picks the systemd flavour and
# pulls in systemd, systemd-sysv and libpam-systemd.
PACKAGES=(
  libvirt-daemon-system libvirt-daemon-system-sysv libvirt-daemon-driver-qemu libvirt-clients
  qemu-system-x86 qemu-utils dnsmasq-base iptables nftables iproute2
  openssh-server openssh-client
  genisoimage busybox-static cpio fdisk dosfstools mtools syslinux syslinux-common
  curl ca-certificates
)
if [ -z "${SKIP_APT:-}" ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The packages' own services (the host's libvirtd with its NAT network `default` and
    # virbr0, an sshd on 0.0.0.0:22) are not started: the test starts its own, in its
    # namespace, and the host's network stack is to show nothing of it. policy-rc.d is the
    # Debian way to say so (invoke-rc.d and deb-systemd-invoke both ask it); one that is
    # already there is left as it is.
    policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\n# egressd .ci/libvirt/setup.sh: no service starts during its apt-get install\nexit 101\n' >/usr/sbin/policy-rc.d
      chmod 0755 /usr/sbin/policy-rc.d
      policy=1
      trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt_rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"; } >"$WORK/apt.log" 2>&1 || apt_rc=$?
    if [ -n "$policy" ]; then
      rm -f /usr/sbin/policy-rc.d
      trap - EXIT
    fi
    [ $apt_rc -eq 0 ] || { tail -n 40 "$WORK/apt.log"; die "apt-get install failed (log: $WORK/apt.log)"; }
  else
    say "packages already installed"
  fi
fi
for b in virsh virtlogd libvirtd sshd qemu-system-x86_64 qemu-img ip ss nsenter unshare mountpoint; do
  command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || die "$b not found after install"
done

# The guest's kernel package, into the cache build-guest.sh reads: the test builds the guest
# inside the namespace, which cannot reach the Debian mirror.
CACHE=$WORK/cache GUEST_KERNEL=${EGRESSD_LIBVIRT_GUEST_KERNEL:-cloud} "$HERE/build-guest.sh" --fetch-kernel

# ------------------------------------------------------------------------------------ /dev/kvm
# Without udev, /dev/kvm stays root:root 0600. libvirt's QEMU capability probe then sees KVM at
# probe time but "not available now" on every later call and re-probes QEMU (~2 s each): one
# DomainDefineXML took 68 s. Give it the ownership udev would. (KVM itself is not used: the
# test's domains are type='qemu', TCG; this machine kind's /dev/kvm is PVM and cannot boot a
# stock Debian kernel.)
if [ -c /dev/kvm ]; then
  cur=$(stat -c '%U:%G %a' /dev/kvm)
  if [ "$cur" != "root:kvm 660" ]; then
    [ -n "$(state_get kvm_mode)" ] || state_set kvm_mode "$(stat -c '%u:%g %a' /dev/kvm)"
    chgrp kvm /dev/kvm
    chmod 0660 /dev/kvm
    say "/dev/kvm: $cur -> root:kvm 660"
  fi
else
  say "no /dev/kvm: QEMU runs in TCG (domainType qemu) anyway"
fi

# ------------------------------------------------------------------------------------ namespaces
if ns_up; then
  say "network namespace $NETNS and its mount namespace exist; reusing them"
else
  state_set netns "$NETNS"
  ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  # The private libvirt tree: the host's config without its networks, pools, domains and
  # secrets; /var/lib/libvirt's directories (not their content) with their owners and modes.
  rm -rf "$ROOT" "$WORK/logs/libvirt"
  mkdir -p "$ROOT/etc" "$ROOT/lib" "$WORK/logs/libvirt/qemu"
  cp -a /etc/libvirt/. "$ROOT/etc/"
  rm -rf "$ROOT/etc/qemu" "$ROOT/etc/storage" "$ROOT/etc/secrets"
  mkdir -p "$ROOT/etc/qemu/networks/autostart" "$ROOT/etc/storage/autostart"
  install -d -m 0700 "$ROOT/etc/secrets"
  for d in /var/lib/libvirt/*/; do
    d=${d%/}
    mkdir -p "$ROOT/lib/${d##*/}"
    chown --reference="$d" "$ROOT/lib/${d##*/}"
    chmod --reference="$d" "$ROOT/lib/${d##*/}"
  done
  # The mount namespace, kept by a bind mount of its nsfs file on a private mount point (a
  # namespace file on a shared mount, systemd's default for /, is refused).
  mkdir -p "$NSDIR" /run/libvirt /run/sshd
  mountpoint -q "$NSDIR" || mount --bind "$NSDIR" "$NSDIR"
  mount --make-private "$NSDIR"
  : >"$MNTNS"
  state_set mntns "$MNTNS"
  unshare --mount="$MNTNS" --propagation slave -- nsenter --net="/run/netns/$NETNS" -- /bin/sh -ec "
    cg=\$(mktemp -d)
    if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup \$cg; fi
    mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
    if mountpoint -q \$cg; then mount --move \$cg /sys/fs/cgroup; fi
    rmdir \$cg
    mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run/libvirt
    mount --bind '$ROOT/etc' /etc/libvirt
    mount --bind '$ROOT/lib' /var/lib/libvirt
    mount --bind '$WORK/logs/libvirt' /var/log/libvirt
  " || die "making the mount namespace failed"
  ns_up || die "namespace $NETNS is not up after making it"
  say "made network namespace $NETNS (loopback only) and its mount namespace $MNTNS"
fi

# ------------------------------------------------------------------------------------ daemons
mkdir -p "$WORK/logs"

# start_daemon NAME BINARY ARGS...: start BINARY in the namespaces, in the background, in its
# own session, with its output in $WORK/logs/NAME.log, and record its PID. It runs in the
# foreground mode of the daemon (no -d), and setsid and nsenter exec it, so the PID recorded is
# the daemon's own.
start_daemon() {
  local name=$1
  shift
  setsid "${NSENTER[@]}" -- "$@" >>"$WORK/logs/$name.log" 2>&1 </dev/null &
  local pid=$!
  state_set "${name}_pid" "$pid"
  say "started $name (pid $pid) in namespace $NETNS"
}

# virtlogd first: libvirtd needs it to start any domain (QEMU's log goes through it).
if ours "$(state_get virtlogd_pid)" /usr/sbin/virtlogd; then
  say "virtlogd (pid $(state_get virtlogd_pid)) from an earlier run is still running"
else
  in_ns rm -f /run/libvirt/virtlogd-sock /run/libvirt/virtlogd-admin-sock
  start_daemon virtlogd /usr/sbin/virtlogd
  for _ in $(seq 1 100); do in_ns test -S /run/libvirt/virtlogd-sock && break; sleep 0.1; done
  in_ns test -S /run/libvirt/virtlogd-sock || { tail -n 20 "$WORK/logs/virtlogd.log"; die "virtlogd did not create its socket"; }
fi
if vsh version >/dev/null 2>&1; then
  say "libvirtd (pid $(state_get libvirtd_pid)) already answers; reusing it"
else
  pid=$(state_get libvirtd_pid)
  if ours "$pid" /usr/sbin/libvirtd; then
    say "libvirtd (pid $pid) from an earlier run does not answer; restarting it"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
  fi
  in_ns rm -f /run/libvirt/libvirt-sock /run/libvirt/libvirt-sock-ro /run/libvirt/libvirt-admin-sock
  # No -l: it means TCP/TLS listening, which wants certificates, and libvirtd exits without them.
  start_daemon libvirtd /usr/sbin/libvirtd
  # The first start probes QEMU's capabilities: 8-12 s.
  for _ in $(seq 1 600); do
    vsh version >/dev/null 2>&1 && break
    alive "$(state_get libvirtd_pid)" || { tail -n 30 "$WORK/logs/libvirtd.log"; die "libvirtd exited"; }
    sleep 0.1
  done
  vsh version >/dev/null 2>&1 || die "libvirtd did not answer within 60s (log: $WORK/logs/libvirtd.log)"
fi
say "libvirt: $(vsh version 2>/dev/null | sed -n 's/^Running hypervisor: //p;s/^Using library: //p' | paste -sd' ')"

# ------------------------------------------------------------------------------------ network
# Isolated: no <forward>, so no NAT and no routing; DHCP by libvirt's dnsmasq. The bridge, its
# firewall rules and dnsmasq are all in the namespace.
# (Lists are captured before matching: `virsh ... | grep -q` under pipefail fails on SIGPIPE,
# and virsh pads names with trailing spaces.)
if ! vsh net-info "$NET" >/dev/null 2>&1; then
  cat >"$WORK/net.xml" <<EOF
<network>
  <name>$NET</name>
  <bridge name='$BRIDGE' stp='off' delay='0'/>
  <ip address='$BRIDGE_IP' netmask='255.255.255.0'>
    <dhcp><range start='192.168.124.10' end='192.168.124.250'/></dhcp>
  </ip>
</network>
EOF
  vsh net-define "$WORK/net.xml" >/dev/null
  say "defined network $NET"
fi
active=$(vsh net-list --name)
if ! grep -qE "^${NET}[[:space:]]*$" <<<"$active"; then
  vsh net-start "$NET" >/dev/null
  say "started network $NET ($BRIDGE, $BRIDGE_IP/24) in namespace $NETNS"
fi
if vsh net-dumpxml "$NET" | grep -q '<forward'; then
  die "network $NET has a <forward> element; the test needs an isolated network"
fi

# ------------------------------------------------------------------------------------ pool
if ! vsh pool-info "$POOL" >/dev/null 2>&1; then
  vsh pool-define-as "$POOL" dir --target "$POOL_DIR" >/dev/null
  say "defined pool $POOL ($POOL_DIR; on the host: $ROOT/lib/${POOL_DIR##*/})"
fi
active=$(vsh pool-list --name)
if ! grep -qE "^${POOL}[[:space:]]*$" <<<"$active"; then
  vsh pool-build "$POOL" >/dev/null 2>&1 || true
  vsh pool-start "$POOL" >/dev/null
  say "started pool $POOL"
fi
in_ns chmod 0755 "$POOL_DIR"

# ------------------------------------------------------------------------------------ sshd
# An sshd of our own on the namespace's 127.0.0.1, with fresh host and client keys, that allows
# forwarding a unix socket (the provider opens a direct-streamlocal channel to libvirt's socket).
S=$WORK/ssh
sshd_pid=$(state_get sshd_pid)
if ours "$sshd_pid" /usr/sbin/sshd && [ -s "$S/clientkey" ]; then
  SSH_PORT=$(state_get ssh_port)
  say "sshd (pid $sshd_pid) from an earlier run is still serving 127.0.0.1:$SSH_PORT in namespace $NETNS"
else
  port_busy() { in_ns bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
  for _ in $(seq 1 100); do port_busy "$SSH_PORT" || break; SSH_PORT=$((SSH_PORT + 1)); done
  port_busy "$SSH_PORT" && die "no free port for sshd"
  rm -rf "$S"
  mkdir -p "$S"
  chmod 0700 "$S"
  ssh-keygen -q -t ed25519 -N '' -C egressd-e2e-host -f "$S/hostkey"
  ssh-keygen -q -t ed25519 -N '' -C egressd-e2e-client -f "$S/clientkey"
  install -m 0600 "$S/clientkey.pub" "$S/authorized_keys"
  echo "[127.0.0.1]:$SSH_PORT $(cut -d' ' -f1,2 "$S/hostkey.pub")" >"$S/known_hosts"
  cat >"$S/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $S/hostkey
PidFile none
AuthorizedKeysFile $S/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowStreamLocalForwarding yes
X11Forwarding no
PermitTTY no
ClientAliveInterval 15
EOF
  /usr/sbin/sshd -t -f "$S/sshd_config" || die "sshd_config rejected"
  start_daemon sshd /usr/sbin/sshd -D -e -f "$S/sshd_config"
  state_set ssh_port "$SSH_PORT"
  for _ in $(seq 1 100); do port_busy "$SSH_PORT" && break; sleep 0.1; done
  port_busy "$SSH_PORT" || { tail -n 20 "$WORK/logs/sshd.log"; die "sshd did not listen on 127.0.0.1:$SSH_PORT in namespace $NETNS"; }
fi

# Check the whole path the provider takes: key auth, host key verification, and a forwarded
# unix socket to libvirtd (the OpenSSH equivalent of direct-streamlocal@openssh.com).
FWD=$WORK/fwd-check.sock
rm -f "$FWD"
"${NSENTER[@]}" -- ssh -F /dev/null -i "$S/clientkey" -o UserKnownHostsFile="$S/known_hosts" -o StrictHostKeyChecking=yes \
  -o BatchMode=yes -o ExitOnForwardFailure=yes -p "$SSH_PORT" -n -N -L "$FWD:$SOCKET" root@127.0.0.1 &
fwd_pid=$!
for _ in $(seq 1 100); do [ -S "$FWD" ] && break; sleep 0.05; done
ok=0
in_ns virsh -c "qemu:///system?socket=$FWD" -q list --all >/dev/null 2>&1 && ok=1
kill "$fwd_pid" 2>/dev/null || true
wait "$fwd_pid" 2>/dev/null || true
rm -f "$FWD"
[ $ok = 1 ] || die "libvirt through ssh -L to 127.0.0.1:$SSH_PORT failed (log: $WORK/logs/sshd.log)"
say "sshd on 127.0.0.1:$SSH_PORT in namespace $NETNS; libvirt reachable through a forwarded unix socket"

# ------------------------------------------------------------------------------------ the host
# None of it shows on the host's network stack, and in the namespace it is all there.
v=$(host_violations)
[ -z "$v" ] || die "the test shows on the host's network stack: $v"
say "in namespace $NETNS: links $(in_ns ip -o link | awk -F': ' '{print $2}' | paste -sd' '); listening: $(in_ns ss -Hltunp | sed -n 's/.*users:(("\([^"]*\)".*/\1/p' | sort -u | paste -sd' ')"
say "on the host: no $BRIDGE, no link of the namespace, no listening socket of its processes"

# ------------------------------------------------------------------------------------ env file
cat >"$WORK/env.tmp" <<EOF
# Written by .ci/libvirt/setup.sh: what the libvirt end-to-end test needs. Every address and
# path in it is the namespace's: run the test through .ci/libvirt/in-ns.sh.
EGRESSD_LIBVIRT_WORK=$WORK
EGRESSD_LIBVIRT_NETNS=$NETNS
EGRESSD_LIBVIRT_SSH_KEY=$S/clientkey
EGRESSD_LIBVIRT_KNOWN_HOSTS=$S/known_hosts
EGRESSD_LIBVIRT_SSH_ADDRESS=127.0.0.1:$SSH_PORT
EGRESSD_LIBVIRT_SSH_USER=root
EGRESSD_LIBVIRT_SOCKET=$SOCKET
EGRESSD_LIBVIRT_URI=qemu:///system
EGRESSD_LIBVIRT_NETWORK=$NET
EGRESSD_LIBVIRT_BRIDGE=$BRIDGE
EGRESSD_LIBVIRT_BRIDGE_IP=$BRIDGE_IP
EGRESSD_LIBVIRT_POOL=$POOL
EGRESSD_LIBVIRT_POOL_DIR=$POOL_DIR
EOF
mv "$WORK/env.tmp" "$WORK/env"
say "done: env file $WORK/env"
