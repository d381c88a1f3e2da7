#!/usr/bin/env bash
# .ci/libvirt/run-e2e.sh: the libvirt end-to-end test, start to finish, for CI.
#
# setup.sh (packages, libvirtd, sshd, isolated network, pool) -> the Go test
# TestLibvirtEndToEnd (builds the guest image, drives the real `egressd run` with a libvirt
# provider) -> teardown.sh, always, even when the test fails. Prints the timings. Run as root
# (sudo is used when not root) on a Debian 12 machine.
#   WORK=/var/tmp/egressd-libvirt-e2e   work dir
#   KEEP=1                              skip the teardown (to look around after a failure)
#   SMOKE=1                             first boot the guest image with plain virsh (no egressd)
#   EGRESSD_LIBVIRT_GUEST_KERNEL=generic  build the guest on Debian's generic kernel
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ]; then exec sudo -E env "PATH=$PATH" "$0" "$@"; fi
export PATH="/usr/local/go/bin:$PATH"
export WORK=${WORK:-/var/tmp/egressd-libvirt-e2e}
HERE=.ci/libvirt

now() { echo "${EPOCHREALTIME/./}"; }
elapsed() { local ms=$((($(now) - $1) / 1000)); printf '%d.%01ds' $((ms / 1000)) $((ms % 1000 / 100)); }
T0=$(now)
TIMES=()

finish() {
  rc=$?
  set +e
  if [ -z "${KEEP:-}" ]; then
    t=$(now)
    "$HERE/teardown.sh"
    TIMES+=("teardown: $(elapsed "$t")")
  else
    echo "KEEP=1: left running; undo with WORK=$WORK $HERE/teardown.sh"
  fi
  echo "================ libvirt end-to-end timings"
  for l in "${TIMES[@]}"; do echo "  $l"; done
  [ -f "$WORK/e2e-summary.txt" ] && sed 's/^/  /' "$WORK/e2e-summary.txt"
  echo "  total: $(elapsed "$T0")"
  if [ $rc -eq 0 ]; then echo "libvirt end-to-end: PASSED"; else echo "libvirt end-to-end: FAILED (rc=$rc)"; fi
  exit $rc
}
trap finish EXIT
trap 'exit 143' TERM INT

rm -f "$WORK/e2e-summary.txt"
t=$(now)
"$HERE/setup.sh"
TIMES+=("setup (packages, daemons, network, pool, sshd): $(elapsed "$t")")

# The nats CLI the Go end-to-end tests drive.
[ -x bin/nats ] || make tools

if [ -n "${SMOKE:-}" ]; then
  t=$(now)
  CACHE=$WORK/cache GUEST_KERNEL=${EGRESSD_LIBVIRT_GUEST_KERNEL:-cloud} "$HERE/build-guest.sh" "$WORK/smoke-image"
  ENV=$WORK/env "$HERE/smoke-guest.sh" "$WORK/smoke-image/egressd-guest.qcow2"
  rm -rf "$WORK/smoke-image"
  TIMES+=("smoke (image build + plain virsh boot + curl through the guest): $(elapsed "$t")")
fi

# CGO_ENABLED=0: the egressd the test builds is then static, and goes into the guest image as
# it is (one build of the dependency tree instead of two).
t=$(now)
set +e
CGO_ENABLED=0 EGRESSD_LIBVIRT_E2E=$WORK/env go test -count=1 -timeout 30m -run '^TestLibvirtEndToEnd$' -v ./cmd/egressd 2>&1 |
  tee "$WORK/e2e-test.log"
rc=${PIPESTATUS[0]}
set -e
TIMES+=("go test TestLibvirtEndToEnd: $(elapsed "$t")")
[ "$rc" -eq 0 ] || exit "$rc"
# A skip is not a pass.
grep -q -- '^--- PASS: TestLibvirtEndToEnd' "$WORK/e2e-test.log" || { echo "TestLibvirtEndToEnd did not run to a pass" >&2; exit 1; }
