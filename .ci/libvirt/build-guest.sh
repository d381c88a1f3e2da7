#!/usr/bin/env bash
# .ci/libvirt/build-guest.sh OUTDIR: build the libvirt end-to-end test's tiny guest image.
#
# Built from Debian packages only, with no loop devices and no mounts (so no privileges are
# needed beyond writing OUTDIR):
#   - the Debian cloud kernel (the package linux-image-cloud-amd64 depends on, downloaded with
#     `apt-get download` and unpacked with dpkg-deb -x, never installed);
#   - a busybox-static initramfs whose init loads the virtio modules, mounts the NoCloud seed
#     (label cidata), sets the hostname from meta-data, gets an address with udhcpc, and, when
#     the user-data starts with "#!", runs it as a script once the network is up (so the
#     user-data path is real: the test's user-data starts the forward proxy);
#   - egressd itself, static (CGO_ENABLED=0), for `egressd forward-proxy` in the guest;
#   - the test's minimal guest agent (providers/libvirt/libvirttest/guestagent), respawned by init;
#   - SYSLINUX on a FAT partition assembled with mtools, converted to a compressed qcow2.
# The guest records its boot timeline (kernel uptime at each step) in
# /run/egressd-guest/boot-times, which the test reads through the guest agent, and prints it on
# the serial console.
#
# Output: OUTDIR/egressd-guest.qcow2 and OUTDIR/egressd-guest.qcow2.sha256.
#   EGRESSD_BIN=...      use this static egressd instead of building one
#   GUEST_AGENT_BIN=...  use this static guest agent instead of building one
#   CACHE=...            where the kernel package is kept between runs (default OUTDIR/cache)
#   GUEST_KERNEL=cloud   the Debian kernel flavour: cloud (default, 27 MB download) or generic
#                        (linux-image-amd64, 71 MB). The cloud kernel has no AHCI driver, so it
#                        cannot see a SATA cdrom (q35's default); generic can.
# Needs: apt (network access to the Debian mirror), busybox-static cpio fdisk dosfstools mtools
# syslinux syslinux-common qemu-utils, and Go unless both binaries are given.
#
# build-guest.sh --fetch-kernel only downloads the kernel package into CACHE (required then) and
# exits: setup.sh does that on the host, because the test builds the guest inside its network
# namespace, which has no way to the mirror.
set -euo pipefail

T0=${EPOCHREALTIME/./}
say() { local ms=$(((${EPOCHREALTIME/./} - T0) / 1000)); printf '[build-guest +%d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"; }
FETCH_ONLY=
if [ "${1:-}" = --fetch-kernel ]; then
  FETCH_ONLY=1
  CACHE=${CACHE:?build-guest.sh --fetch-kernel needs CACHE=dir}
else
  OUT=$(mkdir -p "${1:?usage: build-guest.sh OUTDIR | --fetch-kernel}" && cd "$1" && pwd)
  CACHE=${CACHE:-$OUT/cache}
  W=$OUT/work
  rm -rf "$W"
  mkdir -p "$W"
fi
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$CACHE"

# ------------------------------------------------------------------------------ 1. binaries
if [ -z "$FETCH_ONLY" ]; then
  if [ -z "${EGRESSD_BIN:-}" ]; then
    say "building a static egressd"
    (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$W/egressd" ./cmd/egressd)
    EGRESSD_BIN=$W/egressd
  fi
  if [ -z "${GUEST_AGENT_BIN:-}" ]; then
    say "building the guest agent"
    (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$W/guestagent" ./providers/libvirt/libvirttest/guestagent)
    GUEST_AGENT_BIN=$W/guestagent
  fi
  for b in "$EGRESSD_BIN" "$GUEST_AGENT_BIN"; do
    file -b "$b" 2>/dev/null | grep -q 'dynamically linked' && { echo "$b is dynamically linked; build it with CGO_ENABLED=0" >&2; exit 1; }
  done
fi

# ------------------------------------------------------------------------------ 2. kernel
# The package the metapackage depends on, so that ABI bumps are followed.
case ${GUEST_KERNEL:-cloud} in
cloud) META=linux-image-cloud-amd64 ;;
generic) META=linux-image-amd64 ;;
*) echo "GUEST_KERNEL=$GUEST_KERNEL: cloud or generic" >&2; exit 2 ;;
esac
KPKG=$(apt-cache depends $META 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$KPKG" ]; then
  apt-get update -qq
  KPKG=$(apt-cache depends $META | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[ -n "$KPKG" ] || { echo "cannot resolve $META" >&2; exit 1; }
KV=${KPKG#linux-image-}
DEB=$(ls "$CACHE"/"${KPKG}"_*.deb 2>/dev/null | head -n 1 || true)
if [ -z "$DEB" ]; then
  say "apt-get download $KPKG"
  (cd "$CACHE" && apt-get download "$KPKG" >/dev/null 2>&1) ||
    { echo "apt-get download $KPKG failed (inside the test's network namespace there is no mirror: setup.sh fetches it first)" >&2; exit 1; }
  DEB=$(ls "$CACHE"/"${KPKG}"_*.deb | head -n 1)
fi
if [ -n "$FETCH_ONLY" ]; then
  say "kernel package cached: $DEB"
  exit 0
fi
dpkg-deb -x "$DEB" "$W/k"
cp "$W/k/boot/vmlinuz-$KV" "$W/vmlinuz"
MD=$W/k/lib/modules/$KV
busybox depmod -b "$W/k" "$KV"
say "kernel $KV"

# ------------------------------------------------------------------------------ 3. modules
# Needed: virtio transport, disk, NIC, the agent's serial port, an RNG, the seed cdrom on
# IDE (pc), SATA (q35, when the kernel has AHCI) or virtio-scsi, and the seed's filesystem.
# Optional ones are taken when the kernel has them as modules; built-in ones need nothing.
REQUIRED="virtio_pci virtio_blk virtio_net virtio_console isofs sr_mod"
OPTIONAL="virtio_rng virtio_scsi ata_piix ahci vfat nls_cp437 nls_iso8859_1 af_packet"
declare -A SEEN=()
ORDER=()
add_with_deps() { # $1: module path relative to $MD, dependencies first
  local m=$1 d
  [ -n "${SEEN[$m]:-}" ] && return
  SEEN[$m]=1
  for d in $(awk -F': *' -v m="$m" '$1 == m {print $2}' "$MD/modules.dep"); do add_with_deps "$d"; done
  ORDER+=("$m")
}
find_module() { # $1: module name; prints its path in modules.dep (- and _ are the same)
  local n=${1//-/_}
  awk -F: -v n="$n" '{f=$1; sub(/.*\//, "", f); sub(/\.ko(\.[a-z]+)?$/, "", f); gsub(/-/, "_", f); if (f == n) {print $1; exit}}' "$MD/modules.dep"
}
builtin() { grep -qE "/${1//_/[-_]}\.ko$" "$MD/modules.builtin" 2>/dev/null; }
for n in $REQUIRED $OPTIONAL; do
  p=$(find_module "$n")
  if [ -n "$p" ]; then
    add_with_deps "$p"
  elif ! builtin "$n" && [[ " $REQUIRED " == *" $n "* ]]; then
    echo "kernel $KV has no module $n" >&2
    exit 1
  fi
done

# ------------------------------------------------------------------------------ 4. initramfs
R=$W/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,cidata,lib/modules,var/log}
cp /bin/busybox "$R/bin/busybox"
ln -s bin/busybox "$R/init" # busybox init as PID 1, driven by /etc/inittab
install -m 0755 "$EGRESSD_BIN" "$R/usr/bin/egressd"
install -m 0755 "$GUEST_AGENT_BIN" "$R/usr/bin/guestagent"
# Symbols are no use in the guest and cost boot time (SYSLINUX reads the initramfs slowly).
strip --strip-all "$R/usr/bin/egressd" "$R/usr/bin/guestagent" 2>/dev/null || true
: >"$R/etc/modules"
for m in "${ORDER[@]}"; do
  b=$(basename "$m")
  case $b in
  *.ko.xz) xz -dc "$MD/$m" >"$R/lib/modules/${b%.xz}"; b=${b%.xz} ;;
  *.ko.zst) zstd -qdc "$MD/$m" >"$R/lib/modules/${b%.zst}"; b=${b%.zst} ;;
  *) cp "$MD/$m" "$R/lib/modules/$b" ;;
  esac
  echo "$b" >>"$R/etc/modules"
done

cat >"$R/etc/inittab" <<'EOF'
::sysinit:/etc/rc.sh
::respawn:/usr/bin/guestagent
::shutdown:/bin/busybox umount -a -r
EOF

# rc.sh: everything a cloud image's early boot would do, in one page of shell.
cat >"$R/etc/rc.sh" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /run/egressd-guest
# mark STEP: the boot timeline, in kernel uptime seconds, for the test and the console.
mark() {
  u=$(cut -d' ' -f1 /proc/uptime)
  echo "$1 $u" >>/run/egressd-guest/boot-times
  echo "egressd-guest: $1 uptime=$u${2:+ $2}" >/dev/console
}
mark init
for m in $(cat /etc/modules); do insmod /lib/modules/$m 2>/dev/null; done
ip link set lo up
mark modules

# The NoCloud seed: a filesystem labelled cidata (the provider's ISO; vfat works too).
# busybox's findfs misses some ISOs (a very small one, like the provider's, among them), so
# the ISO 9660 volume label is also read directly: bytes 40-71 of the descriptor at 32 KiB.
iso_label() { dd if="$1" bs=2048 skip=16 count=1 2>/dev/null | dd bs=1 skip=40 count=32 2>/dev/null | tr -d ' \0'; }
DEV=
for i in $(seq 1 100); do
  DEV=$(findfs LABEL=cidata 2>/dev/null || findfs LABEL=CIDATA 2>/dev/null) && [ -n "$DEV" ] && break
  DEV=
  for d in /dev/sr* /dev/vd[b-z] /dev/sd[a-z]; do
    [ -b "$d" ] || continue
    case $(iso_label "$d") in cidata | CIDATA) DEV=$d; break ;; esac
  done
  [ -n "$DEV" ] && break
  sleep 0.1
done
if [ -n "$DEV" ] && mount -o ro "$DEV" /cidata; then
  mark cidata "$DEV"
else
  mark no-cidata "(block devices: $(tail -n +3 /proc/partitions | awk '{printf "%s ", $4}'))"
fi
HN=$(sed -n 's/^[[:space:]]*local-hostname:[[:space:]]*\([^[:space:]]*\).*/\1/p' /cidata/meta-data 2>/dev/null | tr -d "\"'" | head -n 1)
[ -n "$HN" ] && hostname "$HN"

# No udev: the agent's /dev/virtio-ports/<name> links are made here.
mkdir -p /dev/virtio-ports
for p in /sys/class/virtio-ports/*; do
  [ -r "$p/name" ] && ln -sf "/dev/${p##*/}" "/dev/virtio-ports/$(cat "$p/name")"
done

# DHCP on the first NIC, in the background; /etc/udhcpc.sh marks "bound".
IF=
for i in $(seq 1 100); do
  IF=$(ls /sys/class/net | grep -v '^lo$' | head -n 1) && [ -n "$IF" ] && break
  sleep 0.1
done
if [ -n "$IF" ]; then
  ip link set "$IF" up
  udhcpc -i "$IF" -s /etc/udhcpc.sh -b -t 240 -T 1 -A 1 -S ${HN:+-x hostname:$HN -F "$HN"} >/dev/null 2>&1
else
  mark no-nic
fi

# The user-data, run as cloud-init runs a script: once, after the network is up (waiting at
# most 60 s for it), with its output in /var/log/user-data.log and on the console.
if [ "$(head -c 2 /cidata/user-data 2>/dev/null)" = '#!' ]; then
  cp /cidata/user-data /run/user-data
  chmod 0700 /run/user-data
  (
    for i in $(seq 1 600); do grep -q '^bound ' /run/egressd-guest/boot-times && break; sleep 0.1; done
    mark user-data
    /run/user-data >/var/log/user-data.log 2>&1
    rc=$?
    mark user-data-exit "rc=$rc"
    sed 's/^/user-data: /' /var/log/user-data.log >/dev/console
  ) &
elif [ -e /cidata/user-data ]; then
  mark user-data-ignored "(not a script; this guest has no cloud-init)"
else
  mark no-user-data
fi
mark rc-done
EOF

cat >"$R/etc/udhcpc.sh" <<'EOF'
#!/bin/busybox sh
case "$1" in
deconfig)
  ip -4 addr flush dev "$interface"
  ip link set "$interface" up
  ;;
bound | renew)
  ip -4 addr flush dev "$interface"
  ip -4 addr add "$ip/${mask:-24}" ${broadcast:+broadcast $broadcast} dev "$interface"
  for r in $router; do ip route replace default via "$r" dev "$interface"; break; done
  : >/etc/resolv.conf
  for d in $dns; do echo "nameserver $d" >>/etc/resolv.conf; done
  if [ "$1" = bound ]; then
    u=$(cut -d' ' -f1 /proc/uptime)
    echo "bound $u" >>/run/egressd-guest/boot-times
    echo "egressd-guest: bound uptime=$u $ip/$mask on $interface" >/dev/console
  fi
  ;;
esac
EOF
chmod 0755 "$R/etc/rc.sh" "$R/etc/udhcpc.sh"
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -6) >"$W/initrd.gz"
say "initramfs $(du -h "$W/initrd.gz" | cut -f1) (${#ORDER[@]} modules)"

# ------------------------------------------------------------------------------ 5. disk
# MBR (SYSLINUX's mbr.bin) and one bootable FAT32 partition at 1 MiB holding the kernel, the
# initramfs and syslinux.cfg; every step works on plain files (mtools, no mounts).
need_mb=$((($(stat -c %s "$W/vmlinuz") + $(stat -c %s "$W/initrd.gz")) / 1048576 + 16))
SIZE_MB=64
while [ $SIZE_MB -lt $need_mb ]; do SIZE_MB=$((SIZE_MB + 32)); done
cat >"$W/syslinux.cfg" <<'EOF'
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  KERNEL /vmlinuz
  INITRD /initrd.gz
  APPEND console=ttyS0,115200 panic=-1 quiet loglevel=3
EOF
truncate -s ${SIZE_MB}M "$W/disk.raw"
echo 'start=2048, type=c, bootable' | sfdisk -q "$W/disk.raw"
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$W/disk.raw" bs=440 count=1 conv=notrunc status=none
PART_KB=$(((SIZE_MB - 1) * 1024))
mkfs.fat -F 32 -h 2048 -n EGRESSBOOT -C "$W/part.img" $PART_KB >/dev/null
export MTOOLS_SKIP_CHECK=1
mcopy -i "$W/part.img" "$W/vmlinuz" ::vmlinuz
mcopy -i "$W/part.img" "$W/initrd.gz" ::initrd.gz
mcopy -i "$W/part.img" "$W/syslinux.cfg" ::syslinux.cfg
syslinux --install "$W/part.img"
dd if="$W/part.img" of="$W/disk.raw" bs=1M seek=1 conv=notrunc status=none
qemu-img convert -f raw -O qcow2 -c "$W/disk.raw" "$OUT/egressd-guest.qcow2.tmp"
mv "$OUT/egressd-guest.qcow2.tmp" "$OUT/egressd-guest.qcow2"
(cd "$OUT" && sha256sum egressd-guest.qcow2 | cut -d' ' -f1 >egressd-guest.qcow2.sha256)
rm -rf "$W"
say "image $OUT/egressd-guest.qcow2 ($(du -h "$OUT/egressd-guest.qcow2" | cut -f1), ${SIZE_MB} MiB virtual) sha256 $(cat "$OUT/egressd-guest.qcow2.sha256")"
