#!/usr/bin/env bash
# .ci/libvirt/smoke-guest.sh IMAGE: boot the test guest once with plain virsh, without egressd,
# and use the forward proxy its user-data starts. It proves the image and the user-data path on
# their own, so that a failing end-to-end test points at the provider, not at the guest.
#
# Needs setup.sh's env file (ENV=..., default /var/tmp/egressd-libvirt-e2e/env), and runs in the
# test's namespaces (it enters them itself when started outside). Everything it makes (overlay,
# seed, domain, HTTP server) is removed again, whatever happens.
#   BUS=ide|sata|scsi   the seed cdrom's bus (default ide, on machine pc; sata uses q35)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
in_netns $$ || exec "$(dirname "$0")/in-ns.sh" "$0" "$@"
IMAGE=$(realpath "${1:?usage: smoke-guest.sh IMAGE.qcow2}")
ENV=${ENV:-/var/tmp/egressd-libvirt-e2e/env}
BUS=${BUS:-ide}
# shellcheck disable=SC1090
. "$ENV"
export LIBVIRT_DEFAULT_URI=$EGRESSD_LIBVIRT_URI
NAME=egressd-smoke-$$
PORT=3$((RANDOM % 900 + 100))
W=$EGRESSD_LIBVIRT_WORK/smoke-$$
POOL_DIR=$EGRESSD_LIBVIRT_POOL_DIR
SERIAL=/var/log/libvirt/qemu/$NAME-serial.log
mkdir -p "$W"
T0=${EPOCHREALTIME/./}
say() { local ms=$(((${EPOCHREALTIME/./} - T0) / 1000)); printf '[smoke +%d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"; }
HTTP_PID=
cleanup() {
  rc=$?
  set +e
  if [ $rc -ne 0 ]; then echo "--- serial console:"; cat "$SERIAL" 2>/dev/null; fi
  virsh -q destroy "$NAME" >/dev/null 2>&1
  virsh -q undefine "$NAME" >/dev/null 2>&1
  for v in "$NAME.qcow2" "$NAME-seed.iso" "$NAME-base.qcow2"; do virsh -q vol-delete --pool "$EGRESSD_LIBVIRT_POOL" "$v" >/dev/null 2>&1; done
  [ -n "$HTTP_PID" ] && kill "$HTTP_PID" 2>/dev/null && wait "$HTTP_PID" 2>/dev/null
  rm -rf "$W" "$SERIAL"
  exit $rc
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# The target the guest's proxy fetches: a tiny HTTP server on the bridge address only.
mkdir -p "$W/www"
echo "hello from the host via $NAME" >"$W/www/index.html"
for _ in $(seq 1 20); do
  WEB_PORT=$((20000 + RANDOM % 20000))
  busybox httpd -f -p "$EGRESSD_LIBVIRT_BRIDGE_IP:$WEB_PORT" -h "$W/www" >"$W/http.log" 2>&1 &
  HTTP_PID=$!
  sleep 0.2
  kill -0 "$HTTP_PID" 2>/dev/null && break
  HTTP_PID=
done
[ -n "$HTTP_PID" ] || { cat "$W/http.log"; exit 1; }
WEB=http://$EGRESSD_LIBVIRT_BRIDGE_IP:$WEB_PORT/

# The seed, as the provider writes it: user-data is a script that starts egressd's own forward
# proxy, with the credential from egressd.json (username:sha256:<hex salt>:<hex sha256(salt +
# password)>, the line egressd's forward proxy reads from its --auth-file).
cat >"$W/user-data" <<EOF
#!/bin/sh
set -e
auth=\$(sed -n 's/.*"auth":"\([^"]*\)".*/\1/p' /cidata/egressd.json 2>/dev/null || true)
flags=
if [ -n "\$auth" ]; then
  (umask 077; echo "\$auth" > /run/forward-proxy.auth)
  flags="--auth-file /run/forward-proxy.auth"
fi
/usr/bin/egressd forward-proxy --listen 0.0.0.0:$PORT \$flags --pid-file /run/forward-proxy.pid --log-file /var/log/forward-proxy.log &
echo "started egressd forward-proxy on port $PORT"
EOF
printf 'instance-id: %s\nlocal-hostname: %s\n' "$NAME" "$NAME" >"$W/meta-data"
PASS=smoke-$RANDOM$RANDOM
SALT=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
SUM=$({ printf "$(echo "$SALT" | sed 's/../\\x&/g')"; printf %s "$PASS"; } | sha256sum | cut -d' ' -f1)
printf '{"v":1,"name":"%s","port":%d,"auth":"crawler:sha256:%s:%s"}\n' "$NAME" "$PORT" "$SALT" "$SUM" >"$W/egressd.json"
genisoimage -quiet -output "$W/seed.iso" -volid cidata -joliet -rock "$W/user-data" "$W/meta-data" "$W/egressd.json"

# Volumes: the image as the overlay's backing file, and the seed, in the test pool.
install -m 0644 "$IMAGE" "$POOL_DIR/$NAME-base.qcow2"
qemu-img create -q -f qcow2 -F qcow2 -b "$POOL_DIR/$NAME-base.qcow2" "$POOL_DIR/$NAME.qcow2"
# SEED_ISO=path boots with another seed instead (e.g. one the provider built).
install -m 0644 "${SEED_ISO:-$W/seed.iso}" "$POOL_DIR/$NAME-seed.iso"
virsh -q pool-refresh "$EGRESSD_LIBVIRT_POOL" >/dev/null

MACHINE=pc
case $BUS in
ide) CD="<target dev='hdc' bus='ide'/>" ;;
sata) CD="<target dev='sda' bus='sata'/>"; MACHINE=q35 ;;
scsi) CD="<target dev='sda' bus='scsi'/>" ;;
*) echo "BUS=$BUS: ide, sata or scsi" >&2; exit 2 ;;
esac
MAC=$(printf '52:54:00:%02x:%02x:%02x' $((RANDOM % 256)) $((RANDOM % 256)) $((RANDOM % 256)))
cat >"$W/domain.xml" <<EOF
<domain type='qemu'>
  <name>$NAME</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='$MACHINE'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$POOL_DIR/$NAME.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='$POOL_DIR/$NAME-seed.iso'/>
      $CD
      <readonly/>
    </disk>
    $([ "$BUS" = scsi ] && echo "<controller type='scsi' model='virtio-scsi'/>")
    <interface type='network'>
      <source network='$EGRESSD_LIBVIRT_NETWORK'/>
      <mac address='$MAC'/>
      <model type='virtio'/>
    </interface>
    <channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <serial type='file'><source path='$SERIAL'/><target port='0'/></serial>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
virsh -q define "$W/domain.xml" >/dev/null
say "starting $NAME (machine $MACHINE, seed on $BUS, MAC $MAC)"
START=${EPOCHREALTIME/./}
virsh -q start "$NAME" >/dev/null

# The guest's address from libvirt's DHCP leases, by MAC.
IP=
for _ in $(seq 1 2400); do
  IP=$(virsh -q net-dhcp-leases "$EGRESSD_LIBVIRT_NETWORK" --mac "$MAC" 2>/dev/null | awk '{print $5}' | cut -d/ -f1 | head -n 1)
  [ -n "$IP" ] && break
  sleep 0.1
done
[ -n "$IP" ] || { echo "no DHCP lease for $MAC within 4 minutes" >&2; exit 1; }
say "DHCP lease $IP"
OK=
for _ in $(seq 1 600); do
  if out=$(curl -sS --max-time 3 -x "http://crawler:$PASS@$IP:$PORT" "$WEB" 2>/dev/null) && [ "$out" = "hello from the host via $NAME" ]; then OK=1; break; fi
  sleep 0.2
done
[ -n "$OK" ] || { echo "no answer through the guest's proxy http://$IP:$PORT" >&2; exit 1; }
ms=$(((${EPOCHREALTIME/./} - START) / 1000))
say "GET through the guest's forward proxy works, $ms ms after virsh start"
out=$(curl -sS --max-time 5 -p -x "http://crawler:$PASS@$IP:$PORT" "$WEB")
[ "$out" = "hello from the host via $NAME" ] || { echo "CONNECT through the proxy: $out" >&2; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -x "http://crawler:wrong@$IP:$PORT" "$WEB" || true)
[ "$code" = 407 ] || { echo "a wrong password got HTTP $code, want 407" >&2; exit 1; }
say "CONNECT through it works too; a wrong password gets 407"

# The guest agent: hostname, addresses, and the boot timeline through guest-file-read.
virsh -q domhostname "$NAME" --source agent 2>/dev/null | grep -qx "$NAME" || { echo "agent: wrong hostname" >&2; exit 1; }
virsh -q domifaddr "$NAME" --source agent | grep -q "$IP" || { echo "agent: address $IP not reported" >&2; exit 1; }
h=$(virsh -q qemu-agent-command "$NAME" '{"execute":"guest-file-open","arguments":{"path":"/run/egressd-guest/boot-times"}}' | sed 's/[^0-9]//g')
b64=$(virsh -q qemu-agent-command "$NAME" "{\"execute\":\"guest-file-read\",\"arguments\":{\"handle\":$h,\"count\":65536}}" | sed 's/.*"buf-b64":"\([^"]*\)".*/\1/')
virsh -q qemu-agent-command "$NAME" "{\"execute\":\"guest-file-close\",\"arguments\":{\"handle\":$h}}" >/dev/null
say "guest agent OK; guest boot timeline (kernel uptime, s): $(echo "$b64" | base64 -d | paste -sd' ')"
echo "$b64" | base64 -d | grep -q '^user-data ' || { echo "the user-data script did not run" >&2; exit 1; }
say "smoke test passed"
