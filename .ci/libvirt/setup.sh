#!/usr/bin/env bash
# .ci/libvirt/setup.sh: prepare this machine for the libvirt end-to-end test.
#
# For a Debian 12 machine, run as root, with no systemd (PID 1 is not an init system here).
# It installs libvirt, QEMU, sshd and the guest-image tools from Debian's packages, then starts
# virtlogd, libvirtd and an sshd on 127.0.0.1 by hand, and defines an isolated libvirt network
# (no NAT, no forwarding: a guest has no path off this machine) and a dir storage pool.
# Everything the test needs is written to "$WORK/env" (KEY=value lines, shell-sourceable).
#
# Idempotent: a second run reuses what is already running and what already exists. What this
# script starts or defines is recorded in "$WORK/state" so that teardown.sh undoes only that.
#
#   WORK=/var/tmp/egressd-libvirt-e2e  work dir (ssh keys, logs, env and state files)
#   SSH_PORT=2222                      first port tried for sshd on 127.0.0.1
#   SKIP_APT=1                         do not run apt-get (packages already installed)
set -euo pipefail

WORK=${WORK:-/var/tmp/egressd-libvirt-e2e}
SSH_PORT=${SSH_PORT:-2222}
NET=egressd-e2e
BRIDGE=virbr-egr
BRIDGE_IP=192.168.124.1
POOL=egressd-e2e
POOL_DIR=/var/lib/libvirt/egressd-e2e-pool
SOCKET=/var/run/libvirt/libvirt-sock
export LIBVIRT_DEFAULT_URI=qemu:///system

START=${EPOCHREALTIME/./}
say() {
  local ms=$(((${EPOCHREALTIME/./} - START) / 1000))
  printf '[setup +%d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"
}
die() { echo "setup.sh: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
mkdir -p "$WORK"
chmod 0755 "$WORK"
STATE=$WORK/state
touch "$STATE"

# state_get KEY prints the recorded value; state_set KEY VALUE records one (last wins).
state_get() { sed -n "s/^$1=//p" "$STATE" | tail -n 1; }
state_set() { sed -i "/^$1=/d" "$STATE"; echo "$1=$2" >>"$STATE"; }

# alive PID: the process exists and is not a zombie (PID 1 here never reaps orphans).
alive() {
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] || return 1
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ]
}

# exe_of PID prints the executable of a live process.
exe_of() { readlink "/proc/$1/exe" 2>/dev/null || true; }

# running EXE: some live process runs EXE. (Not pgrep: it also matches the zombies PID 1 leaves
# here, and a zombie virtlogd is no virtlogd. A zombie has no exe link.)
running() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$1" ] && alive "${p#/proc/}" && return 0
  done
  return 1
}

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
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >"$WORK/apt.log" 2>&1 ||
      { tail -n 40 "$WORK/apt.log"; die "apt-get install failed (log: $WORK/apt.log)"; }
  else
    say "packages already installed"
  fi
fi
for b in virsh virtlogd libvirtd sshd qemu-system-x86_64 qemu-img; do
  command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || die "$b not found after install"
done
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

# ------------------------------------------------------------------------------------ daemons
mkdir -p /run/libvirt /run/sshd "$WORK/logs"

# start_daemon NAME BINARY ARGS...: start BINARY in the background, in its own session, with
# its output in $WORK/logs/NAME.log, and record its PID. It runs in the foreground mode of the
# daemon (no -d), so the PID recorded is the daemon's own.
start_daemon() {
  local name=$1
  shift
  setsid "$@" >>"$WORK/logs/$name.log" 2>&1 </dev/null &
  local pid=$!
  state_set "${name}_pid" "$pid"
  say "started $name (pid $pid)"
}

# virtlogd first: libvirtd needs it to start any domain (QEMU's log goes through it). Both are
# reused when already running (ours from an earlier run, or the machine's own).
if ! running /usr/sbin/virtlogd; then
  rm -f /run/libvirt/virtlogd-sock /run/libvirt/virtlogd-admin-sock # stale: /run is on disk here
  start_daemon virtlogd /usr/sbin/virtlogd
  for _ in $(seq 1 100); do [ -S /run/libvirt/virtlogd-sock ] && break; sleep 0.1; done
  [ -S /run/libvirt/virtlogd-sock ] || { tail -n 20 "$WORK/logs/virtlogd.log"; die "virtlogd did not create its socket"; }
fi
if virsh -q version >/dev/null 2>&1; then
  say "libvirtd already answers; reusing it"
else
  pid=$(state_get libvirtd_pid)
  if alive "$pid" && [ "$(exe_of "$pid")" = /usr/sbin/libvirtd ]; then
    say "libvirtd (pid $pid) from an earlier run does not answer; restarting it"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
  fi
  running /usr/sbin/libvirtd && die "a libvirtd not started by this script is running but does not answer"
  rm -f /run/libvirt/libvirt-sock /run/libvirt/libvirt-sock-ro /run/libvirt/libvirt-admin-sock
  # No -l: it means TCP/TLS listening, which wants certificates, and libvirtd exits without them.
  start_daemon libvirtd /usr/sbin/libvirtd
  # The first start probes QEMU's capabilities: 8-12 s.
  for _ in $(seq 1 600); do
    virsh -q version >/dev/null 2>&1 && break
    alive "$(state_get libvirtd_pid)" || { tail -n 30 "$WORK/logs/libvirtd.log"; die "libvirtd exited"; }
    sleep 0.1
  done
  virsh -q version >/dev/null 2>&1 || die "libvirtd did not answer within 60s (log: $WORK/logs/libvirtd.log)"
fi
say "libvirt: $(virsh -q version 2>/dev/null | sed -n 's/^Running hypervisor: //p;s/^Using library: //p' | paste -sd' ')"

# ------------------------------------------------------------------------------------ network
# Isolated: no <forward>, so no NAT, no routing, ip_forward untouched. DHCP by libvirt's dnsmasq.
# (Lists are captured before matching: `virsh ... | grep -q` under pipefail fails on SIGPIPE,
# and virsh pads names with trailing spaces.)
if ! virsh net-info "$NET" >/dev/null 2>&1; then
  if ip -4 route show | grep -q "^192\.168\.124\.0/24 " && ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "192.168.124.0/24 is already routed on this machine; the isolated test network needs it"
  fi
  cat >"$WORK/net.xml" <<EOF
<network>
  <name>$NET</name>
  <bridge name='$BRIDGE' stp='off' delay='0'/>
  <ip address='$BRIDGE_IP' netmask='255.255.255.0'>
    <dhcp><range start='192.168.124.10' end='192.168.124.250'/></dhcp>
  </ip>
</network>
EOF
  virsh -q net-define "$WORK/net.xml" >/dev/null
  state_set net_defined "$NET"
  say "defined network $NET"
fi
active=$(virsh -q net-list --name)
if ! grep -qE "^${NET}[[:space:]]*$" <<<"$active"; then
  virsh -q net-start "$NET" >/dev/null
  say "started network $NET ($BRIDGE, $BRIDGE_IP/24)"
fi
if virsh -q net-dumpxml "$NET" | grep -q '<forward'; then
  die "network $NET has a <forward> element; the test needs an isolated network"
fi

# ------------------------------------------------------------------------------------ pool
if ! virsh pool-info "$POOL" >/dev/null 2>&1; then
  virsh -q pool-define-as "$POOL" dir --target "$POOL_DIR" >/dev/null
  state_set pool_defined "$POOL"
  say "defined pool $POOL ($POOL_DIR)"
fi
active=$(virsh -q pool-list --name)
if ! grep -qE "^${POOL}[[:space:]]*$" <<<"$active"; then
  virsh -q pool-build "$POOL" >/dev/null 2>&1 || true
  virsh -q pool-start "$POOL" >/dev/null
  say "started pool $POOL"
fi
chmod 0755 "$POOL_DIR"

# ------------------------------------------------------------------------------------ sshd
# An sshd of our own on 127.0.0.1, with fresh host and client keys, that allows forwarding a
# unix socket (the provider opens a direct-streamlocal channel to libvirt's socket).
S=$WORK/ssh
sshd_pid=$(state_get sshd_pid)
if alive "$sshd_pid" && [ "$(exe_of "$sshd_pid")" = /usr/sbin/sshd ] && [ -s "$S/clientkey" ]; then
  SSH_PORT=$(state_get ssh_port)
  say "sshd (pid $sshd_pid) from an earlier run is still serving 127.0.0.1:$SSH_PORT"
else
  port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
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
  port_busy "$SSH_PORT" || { tail -n 20 "$WORK/logs/sshd.log"; die "sshd did not listen on 127.0.0.1:$SSH_PORT"; }
fi

# Check the whole path the provider takes: key auth, host key verification, and a forwarded
# unix socket to libvirtd (the OpenSSH equivalent of direct-streamlocal@openssh.com).
FWD=$WORK/fwd-check.sock
rm -f "$FWD"
ssh -F /dev/null -i "$S/clientkey" -o UserKnownHostsFile="$S/known_hosts" -o StrictHostKeyChecking=yes \
  -o BatchMode=yes -o ExitOnForwardFailure=yes -p "$SSH_PORT" -n -N -L "$FWD:$SOCKET" root@127.0.0.1 &
fwd_pid=$!
for _ in $(seq 1 100); do [ -S "$FWD" ] && break; sleep 0.05; done
ok=0
virsh -c "qemu:///system?socket=$FWD" -q list --all >/dev/null 2>&1 && ok=1
kill "$fwd_pid" 2>/dev/null || true
wait "$fwd_pid" 2>/dev/null || true
rm -f "$FWD"
[ $ok = 1 ] || die "libvirt through ssh -L to 127.0.0.1:$SSH_PORT failed (log: $WORK/logs/sshd.log)"
say "sshd on 127.0.0.1:$SSH_PORT; libvirt reachable through a forwarded unix socket"

# ------------------------------------------------------------------------------------ env file
cat >"$WORK/env.tmp" <<EOF
# Written by .ci/libvirt/setup.sh: what the libvirt end-to-end test needs.
EGRESSD_LIBVIRT_WORK=$WORK
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
