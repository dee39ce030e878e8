# shellcheck shell=bash
# Sourced by the fake systemctl, nvidia-ctk and crictl: a model of containerd's runtime config.
# The config on disk and the config the running containerd loaded are separate, as on a real
# node: `nvidia-ctk runtime configure` changes the first, only a (re)start loads it.
# At boot the AMI's containerd already runs with its packaged default runtime, runc
# (FAKE_CONTAINERD_STOPPED=1: not running at boot). State lives in $KK_SANDBOX_OUT/state.

kk_containerd_state() {
  local dir=${KK_SANDBOX_OUT:?KK_SANDBOX_OUT is unset: run fakes through run-userdata.sh}/state
  mkdir -p "$dir"
  if [ ! -e "$dir/booted" ]; then
    : >"$dir/booted"
    if [ "${FAKE_CONTAINERD_STOPPED:-}" != 1 ]; then
      echo runc >"$dir/running"
    fi
  fi
  printf '%s' "$dir"
}

# The default runtime of the running containerd; empty when it is not running.
kk_containerd_running() {
  local dir
  dir=$(kk_containerd_state)
  cat "$dir/running" 2>/dev/null || true
}

# The default runtime the config on disk names.
kk_containerd_config() {
  local dir
  dir=$(kk_containerd_state)
  cat "$dir/config" 2>/dev/null || echo runc
}

kk_containerd_set_config() {
  local dir
  dir=$(kk_containerd_state)
  echo "$1" >"$dir/config"
}

# (Re)start: the running containerd takes the config on disk.
kk_containerd_load() {
  local dir
  dir=$(kk_containerd_state)
  kk_containerd_config >"$dir/running"
}

kk_containerd_stop() {
  local dir
  dir=$(kk_containerd_state)
  rm -f "$dir/running"
}
