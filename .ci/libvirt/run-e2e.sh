#!/usr/bin/env bash
# .ci/libvirt/run-e2e.sh: the libvirt end-to-end test, start to finish, for CI.
#
# setup.sh (packages, the test's network namespace, libvirtd, sshd, isolated network, pool)
# -> the Go test TestLibvirtEndToEnd inside that namespace (it builds the guest image and
# drives the real `egressd run` with a libvirt provider), while this script checks the host's
# network stack every 2 s for anything of the test -> teardown.sh, always, even when the test
# fails. Prints the timings. Run as root (sudo is used when not root) on a Debian 12 machine.
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
# shellcheck source=lib.sh
. "$HERE/lib.sh"

now() { echo "${EPOCHREALTIME/./}"; }
elapsed() { local ms=$((($(now) - $1) / 1000)); printf '%d.%01ds' $((ms / 1000)) $((ms % 1000 / 100)); }
T0=$(now)
TIMES=()
VIOLATIONS=$WORK/host-violations.txt
CHECKS=$WORK/host-checks
SNAPSHOT=$WORK/host-snapshot.txt

finish() {
  rc=$?
  set +e
  if [ -z "${KEEP:-}" ]; then
    t=$(now)
    "$HERE/teardown.sh" || { [ $rc -ne 0 ] || rc=1; }
    TIMES+=("teardown: $(elapsed "$t")")
  else
    echo "KEEP=1: left running; look around with $HERE/in-ns.sh CMD, undo with WORK=$WORK $HERE/teardown.sh"
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

rm -f "$WORK/e2e-summary.txt" "$VIOLATIONS" "$CHECKS" "$SNAPSHOT"
t=$(now)
"$HERE/setup.sh"
TIMES+=("setup (packages, namespace, daemons, network, pool, sshd): $(elapsed "$t")")

# What the namespace cannot fetch, fetched here: the modules, and the nats CLI the Go
# end-to-end tests drive.
go mod download
[ -x bin/nats ] || make tools

if [ -n "${SMOKE:-}" ]; then
  t=$(now)
  CACHE=$WORK/cache GUEST_KERNEL=${EGRESSD_LIBVIRT_GUEST_KERNEL:-cloud} "$HERE/build-guest.sh" "$WORK/smoke-image"
  ENV=$WORK/env "$HERE/smoke-guest.sh" "$WORK/smoke-image/egressd-guest.qcow2"
  rm -rf "$WORK/smoke-image"
  TIMES+=("smoke (image build + plain virsh boot + curl through the guest): $(elapsed "$t")")
fi

# watch_host PID: while PID (the go test) runs, check the host's network stack every 2 s;
# findings go to $VIOLATIONS, the number of checks to $CHECKS. The first time a guest's tap
# device is on the bridge, what the namespace and the host hold is noted in $SNAPSHOT.
watch_host() {
  local n=0 v taps
  while alive "$1"; do
    v=$(host_violations "$1")
    n=$((n + 1))
    [ -z "$v" ] || { echo "$(date -u +%T) $v" | tee -a "$VIOLATIONS" >&2; }
    echo "$n" >"$CHECKS"
    if [ ! -s "$SNAPSHOT" ] && taps=$(in_ns ip -br link show master "$BRIDGE" 2>/dev/null) && [ -n "$taps" ]; then
      {
        echo "in namespace $NETNS: links $(in_ns ip -br link | awk '{print $1}' | paste -sd' '); listening: $(in_ns ss -Hltunp | sed -n 's/.*users:(("\([^"]*\)".*/\1/p' | sort -u | paste -sd' ')"
        echo "on the host: links $(ip -br link | awk '{print $1}' | paste -sd' '); $(ss -Hltun | wc -l) listening sockets, none of a process of the namespace"
      } >"$SNAPSHOT"
    fi
    sleep 2
  done
}

# The test, in the namespace. CGO_ENABLED=0: the egressd the test builds is then static, and
# goes into the guest image as it is (one build of the dependency tree instead of two).
# GOPROXY=off: the namespace has no way out, so a missing module fails at once, by name.
t=$(now)
: >"$WORK/e2e-test.log"
"${NSENTER[@]}" --wd="$PWD" -- env CGO_ENABLED=0 GOPROXY=off EGRESSD_LIBVIRT_E2E="$WORK/env" \
  go test -count=1 -timeout 30m -run '^TestLibvirtEndToEnd$' -v ./cmd/egressd/e2e >"$WORK/e2e-test.log" 2>&1 &
test_pid=$!
watch_host "$test_pid" &
watch_pid=$!
tail -n +1 -f --pid="$test_pid" "$WORK/e2e-test.log"
rc=0
wait "$test_pid" || rc=$?
wait "$watch_pid" || true
TIMES+=("go test TestLibvirtEndToEnd (in namespace $NETNS): $(elapsed "$t")")
if [ -s "$VIOLATIONS" ]; then
  TIMES+=("host network stack: FOUND THE TEST ON IT ($(wc -l <"$VIOLATIONS") findings in $(cat "$CHECKS") checks, $VIOLATIONS)")
  echo "the test showed on the host's network stack:" >&2
  cat "$VIOLATIONS" >&2
  [ "$rc" -ne 0 ] || rc=1
else
  TIMES+=("host network stack checked $(cat "$CHECKS" 2>/dev/null || echo 0) times during the test: no $BRIDGE, no tap, no listener of the test")
fi
[ -s "$SNAPSHOT" ] && while read -r l; do TIMES+=("  $l"); done <"$SNAPSHOT"
[ "$rc" -eq 0 ] || exit "$rc"
# A skip is not a pass.
grep -q -- '^--- PASS: TestLibvirtEndToEnd' "$WORK/e2e-test.log" || { echo "TestLibvirtEndToEnd did not run to a pass" >&2; exit 1; }
