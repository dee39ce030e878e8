# shellcheck shell=bash
# Sourced by the fakes in ../fakebin and ../fakebin-fast: appends the fake's argv, as one JSON
# array of strings per line, to $KK_SANDBOX_OUT/calls.log (run-userdata.sh sets it).

kk_json_string() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/\\t}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  printf '"%s"' "$s"
}

# kk_record NAME ARGS...: logs ["NAME", "ARG1", ...].
kk_record() {
  local out=${KK_SANDBOX_OUT:?KK_SANDBOX_OUT is unset: run fakes through run-userdata.sh}
  local line="[" sep="" arg
  for arg in "$@"; do
    line+="$sep$(kk_json_string "$arg")"
    sep=","
  done
  printf '%s]\n' "$line" >>"$out/calls.log"
}
