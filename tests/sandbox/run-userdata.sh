#!/usr/bin/env bash
# run-userdata.sh SCRIPT OUTDIR
#
# Runs a rendered EC2NodeClass userData script the way cloud-init runs it on an instance that
# Karpenter launched (once, as root, from /, with a minimal environment), but in isolation:
#
#   * network: a new network namespace (unshare --net) whose only interface is its own
#     loopback, with 169.254.169.254/32 added; fake_imds.py listens there on port 80 and
#     behaves like IMDS with httpTokens=required (tokenless requests get 401). Nothing
#     outside the namespace can be reached, so no request ever leaves the machine.
#   * files: a new mount namespace (unshare --mount, private propagation) where /etc is an
#     overlayfs whose upper layer is OUTDIR/etc-upper: what the script writes under /etc lands
#     there and the real /etc is never touched. /dev/console is bind-mounted from
#     OUTDIR/console.log. Both mounts vanish with the namespace.
#   * processes: a new PID namespace (unshare --pid --fork --mount-proc); when the run ends,
#     everything it started (the fake IMDS included) is killed by the kernel.
#     /var/lib is an overlay and /mnt a tmpfs of the namespace too (the local-NVMe userData
#     writes there); their writes are discarded.
#   * commands: PATH starts with fakebin/ (kubeadm, systemctl, nvidia-smi, nvidia-ctk,
#     nvidia-container-runtime, crictl, aws, lsblk, mdadm, mkfs.xfs, mkfs.ext4, mount), whose fakes log their argv as one JSON array per line to
#     OUTDIR/calls.log. curl, date and bash are the real ones.
#
# Knobs (environment; every FAKE_* variable is passed to the script's environment too):
#   FAKE_JOIN_CONFIG=FILE    what the fake `aws` returns as the SSM / Secrets Manager value;
#                            unset: AccessDeniedException, exit 255
#   FAKE_NVIDIA_DRIVER=V     the driver version the fake nvidia-smi reports (550.127.05)
#   FAKE_NVIDIA_FAIL=1       nvidia-smi cannot talk to the driver (exit 9)
#   FAKE_NO_NVIDIA=1         no nvidia-smi on PATH (the fake and any real one are hidden)
#   FAKE_NO_NVIDIA_RUNTIME=1 no nvidia-container-runtime on PATH
#   FAKE_HIDE="CMD ..."      no CMD on PATH (fake or real), e.g. FAKE_HIDE=aws
#   FAKE_KUBEADM_RC=N        exit status of the fake kubeadm (0)
#   FAKE_FAST_SLEEP=1        fakebin-fast/ first on PATH: `sleep` returns at once (negative
#                            tests of retry loops only)
#   FAKE_INSTANCE_ID, FAKE_AZ  what the fake IMDS serves (i-0123456789abcdef0, us-east-1b)
#   FAKE_INSTANCE_STORE="nvme1n1 ..."  instance-store NVMe disks the fake lsblk lists (none)
#   FAKE_MDADM_RC=N          exit status of the fake mdadm (0)
#   FAKE_CONTAINERD_STOPPED=1  containerd is not running at boot (default: running, runc; see
#                            lib/containerd.sh for how systemctl, nvidia-ctk and crictl share it)
#   SANDBOX_TIMEOUT=S        kill the script after S seconds (60; exit 124)
#
# OUTDIR afterwards: calls.log, imds.log (JSON lines: method, path, token, status),
# stdout.log, stderr.log, console.log, etc-upper/ (the script's writes under /etc),
# run-files.log (files left under /run, a tmpfs of the sandbox's own), kubeadm-config.*
# and cmdline-leaks.log (what the fake kubeadm found), sandbox.log (the runner's own messages).
#
# Exit status: the script's. 77: namespaces are not available here (not root, or unshare is
# refused); 70: the sandbox could not be set up (see OUTDIR/sandbox.log); 64: bad usage.
set -euo pipefail

SANDBOX_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
IMDS_ADDRESS=169.254.169.254
SYSTEM_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

usage() {
  echo "usage: run-userdata.sh SCRIPT OUTDIR" >&2
  exit 64
}

outside() {
  [ $# -eq 2 ] || usage
  local script=$1 out=$2
  if [ ! -f "$script" ]; then
    echo "run-userdata: no such script: $script" >&2
    exit 64
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "run-userdata: must run as root (unshare --net --mount)" >&2
    exit 77
  fi
  if ! unshare --net --mount --pid --fork --mount-proc true 2>/dev/null; then
    echo "run-userdata: cannot create network/mount/PID namespaces here (unshare refused)" >&2
    exit 77
  fi
  mkdir -p "$out"
  out="$(cd "$out" && pwd -P)"
  script="$(cd "$(dirname "$script")" && pwd -P)/$(basename "$script")"
  case "$out" in
    *[,:]*)
      echo "run-userdata: OUTDIR must not contain ',' or ':' (overlayfs options): $out" >&2
      exit 64
      ;;
  esac
  : >"$out/calls.log"
  : >"$out/imds.log"
  : >"$out/sandbox.log"
  exec unshare --net --mount --pid --fork --mount-proc --propagation private \
    "$BASH" "$SANDBOX_DIR/run-userdata.sh" --inside "$script" "$out"
}

# --- everything below runs inside the namespaces, as PID 1 -------------------------------

setup_fail() {
  echo "run-userdata: sandbox setup failed: $*" | tee -a "$OUT/sandbox.log" >&2
  exit 70
}

note() {
  echo "run-userdata: $*" >>"$OUT/sandbox.log"
}

setup_network() {
  command -v ip >/dev/null || setup_fail "'ip' (iproute2) not found"
  ip link set lo up || setup_fail "cannot bring up lo"
  ip addr add "$IMDS_ADDRESS/32" dev lo || setup_fail "cannot add $IMDS_ADDRESS to lo"
  note "network: new namespace, lo up with $IMDS_ADDRESS/32, no other interface"
}

ETC_TMPFS=""
setup_etc() {
  mkdir -p "$OUT/etc-upper" "$OUT/.etc-work"
  if mount -t overlay overlay \
    -o "lowerdir=/etc,upperdir=$OUT/etc-upper,workdir=$OUT/.etc-work" /etc 2>>"$OUT/sandbox.log"; then
    note "/etc: overlayfs, upper layer $OUT/etc-upper"
  else
    # OUTDIR's filesystem cannot be an overlay upper layer: keep the layer on a tmpfs and
    # copy it to OUTDIR/etc-upper when the script is done.
    ETC_TMPFS="$OUT/.etc-tmpfs"
    mkdir -p "$ETC_TMPFS"
    mount -t tmpfs -o mode=0755 tmpfs "$ETC_TMPFS" || setup_fail "cannot mount a tmpfs for /etc"
    mkdir -p "$ETC_TMPFS/upper" "$ETC_TMPFS/work"
    mount -t overlay overlay \
      -o "lowerdir=/etc,upperdir=$ETC_TMPFS/upper,workdir=$ETC_TMPFS/work" /etc ||
      setup_fail "cannot mount an overlay on /etc"
    note "/etc: overlayfs, upper layer on a tmpfs, copied to $OUT/etc-upper afterwards"
  fi
  # Karpenter's AMIs have it; a minimal build host may not. Created in the overlay only.
  mkdir -p /etc/systemd/system
  : >"$OUT/console.log"
  if [ -e /dev/console ]; then
    mount --bind "$OUT/console.log" /dev/console || setup_fail "cannot bind-mount /dev/console"
    note "/dev/console: bound to $OUT/console.log"
  fi
}

# hide_command NAME PATH: makes NAME unfindable on PATH. bash's `command -v` still reports a
# non-executable file, so the file must disappear: every PATH folder holding NAME gets an
# overlayfs whose upper layer has a whiteout for it (in this mount namespace only).
hide_command() {
  local name=$1 path=$2 dir layer
  local -a dirs
  if ! mountpoint -q "$OUT/.hide"; then
    mkdir -p "$OUT/.hide"
    mount -t tmpfs -o mode=0700 tmpfs "$OUT/.hide" || setup_fail "cannot mount a tmpfs for hiding $name"
  fi
  IFS=: read -ra dirs <<<"$path"
  for dir in "${dirs[@]}"; do
    if [ -e "$dir/$name" ] || [ -L "$dir/$name" ]; then
      layer="$(mktemp -d "$OUT/.hide/layer.XXXXXX")"
      mkdir "$layer/upper" "$layer/work"
      mknod "$layer/upper/$name" c 0 0 || setup_fail "cannot create a whiteout for $name"
      mount -t overlay overlay -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" "$dir" ||
        setup_fail "cannot hide $dir/$name"
      note "hid $dir/$name"
    fi
  done
}

# The local-NVMe userData creates and copies into /var/lib/kubelet, /var/lib/containerd and
# /mnt/kubean-local: /var/lib becomes an overlay and /mnt a tmpfs, both in this namespace only.
setup_var_lib() {
  case "$OUT/" in
    /var/lib/* | /mnt/*) setup_fail "OUTDIR must not be under /var/lib or /mnt (they are replaced here): $OUT" ;;
  esac
  local layer="$OUT/.var-lib-tmpfs"
  mkdir -p "$layer"
  mount -t tmpfs -o mode=0755 tmpfs "$layer" || setup_fail "cannot mount a tmpfs for /var/lib"
  mkdir -p "$layer/upper" "$layer/work"
  mount -t overlay overlay -o "lowerdir=/var/lib,upperdir=$layer/upper,workdir=$layer/work" /var/lib ||
    setup_fail "cannot mount an overlay on /var/lib"
  mount -t tmpfs -o mode=0755 tmpfs /mnt || setup_fail "cannot mount a tmpfs on /mnt"
  note "/var/lib: overlayfs, upper layer on a tmpfs (discarded); /mnt: a fresh tmpfs"
}

IMDS_PID=""
start_imds() {
  local ready="$OUT/.imds.ready" i
  rm -f "$ready"
  python3 "$SANDBOX_DIR/fake_imds.py" --host "$IMDS_ADDRESS" --port 80 \
    --log "$OUT/imds.log" --ready "$ready" 2>>"$OUT/sandbox.log" &
  IMDS_PID=$!
  for ((i = 0; i < 200; i++)); do
    [ -e "$ready" ] && return 0
    kill -0 "$IMDS_PID" 2>/dev/null || setup_fail "fake_imds.py exited (see sandbox.log)"
    sleep 0.05
  done
  setup_fail "fake_imds.py did not start listening within 10 s"
}

inside() {
  local script=$1
  OUT=$2
  setup_network
  setup_etc
  # /run is a tmpfs of its own, as on an instance: the join configuration the script writes
  # there never reaches the host's /run. What is left in it afterwards is listed.
  mount -t tmpfs -o mode=0755 tmpfs /run || setup_fail "cannot mount a tmpfs on /run"
  note "/run: a fresh tmpfs"
  setup_var_lib

  local path="$SANDBOX_DIR/fakebin:$SYSTEM_PATH"
  if [ "${FAKE_FAST_SLEEP:-}" = 1 ]; then
    path="$SANDBOX_DIR/fakebin-fast:$path"
  fi
  if [ "${FAKE_NO_NVIDIA:-}" = 1 ]; then
    hide_command nvidia-smi "$path"
  fi
  if [ "${FAKE_NO_NVIDIA_RUNTIME:-}" = 1 ]; then
    hide_command nvidia-container-runtime "$path"
  fi
  local hidden
  for hidden in ${FAKE_HIDE:-}; do
    hide_command "$hidden" "$path"
  done
  start_imds

  # cloud-init copies the user data to /var/lib/cloud/instance/scripts/part-001 and runs it by
  # its shebang; the copy lives in OUTDIR here and the interpreter is called explicitly, so a
  # noexec OUTDIR does not matter.
  cp "$script" "$OUT/part-001"
  chmod 0700 "$OUT/part-001"
  local shebang
  IFS= read -r shebang <"$OUT/part-001" || true
  local -a interpreter
  case "$shebang" in
    '#!'*) read -ra interpreter <<<"${shebang#\#!}" ;;
    *) interpreter=(/bin/sh) ;;
  esac

  local -a environment=(
    "PATH=$path"
    "HOME=/root"
    "LC_ALL=C"
    "KK_SANDBOX_OUT=$OUT"
  )
  local name
  while IFS= read -r name; do
    environment+=("$name=${!name}")
  done < <(compgen -e | grep '^FAKE_' || true)

  note "running ${interpreter[*]} part-001"
  local rc=0
  (
    cd /
    exec timeout --kill-after=5 "${SANDBOX_TIMEOUT:-60}" \
      env -i "${environment[@]}" "${interpreter[@]}" "$OUT/part-001"
  ) </dev/null >"$OUT/stdout.log" 2>"$OUT/stderr.log" || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "run-userdata: script killed after ${SANDBOX_TIMEOUT:-60} s" >>"$OUT/stderr.log"
  fi
  note "script exit status $rc"

  kill "$IMDS_PID" 2>/dev/null || true
  wait "$IMDS_PID" 2>/dev/null || true
  (cd /run && find . -type f | sort) >"$OUT/run-files.log"
  if [ -n "$ETC_TMPFS" ]; then
    cp -a "$ETC_TMPFS/upper/." "$OUT/etc-upper/"
  fi
  exit "$rc"
}

if [ "${1:-}" = --inside ]; then
  shift
  [ $# -eq 2 ] || usage
  inside "$@"
else
  outside "$@"
fi
