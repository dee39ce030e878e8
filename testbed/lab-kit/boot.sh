#!/usr/bin/env bash
# Boots one emulated EC2 instance of the lab (test tooling). Runs as pid 1 of its own
# mount and UTS namespaces, inside the instance's network namespace (node_runner.py made
# both). Gives the instance its own /etc and /var (overlays on the host's, changes kept
# under NODE/) and /run, the AMI profile's programs under /opt/kk-ami, a fake IMDS on
# 169.254.169.254, then runs the instance's real userData with bash, as cloud-init would,
# and stays up (holding the namespaces) until the runner stops it.
#
#   boot.sh NODE   NODE holds instance.json, user-data, hardware.json, profile
set -euo pipefail
node="$1"
kit="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${KK_LAB_BIN:?}" "${KK_LAB_API_IP:?}" "${KK_LAB_API_NAME:?}" "${KK_LAB_AWS:?}" "${KK_LAB_CRICTL:?}" "${KK_LAB_NODE_AWS_ENDPOINT:?}"
profile="$(cat "$node/profile")"
# shellcheck disable=SC1090
source "$kit/profiles/$profile.env"
api_port_blocked=false
if [[ -n "${KK_LAB_FAULTS:-}" && -e "$KK_LAB_FAULTS/api-port-blocked" ]]; then
  api_port_blocked=true
fi

# The repository (kit and NODE) may live anywhere, /var included: everything the instance
# reads from it is copied now and every log it writes there is opened now, before the
# mounts below can hide it.
mount --make-rprivate /
mkdir -p /opt/kk-ami
mount -t tmpfs -o mode=755 tmpfs /opt/kk-ami
mkdir -p /opt/kk-ami/bin /opt/kk-ami/units /opt/kk-ami/kit /opt/kk-ami/instance
cp -r "$kit/ami/units/." /opt/kk-ami/units/
cp -r "$kit/ami/bin" "$kit/imds.py" /opt/kk-ami/kit/
cp "$node/instance.json" "$node/hardware.json" "$node/user-data" /opt/kk-ami/instance/
exec 3>>"$node/console.log" 4>>"$node/imds.log" 5>>"$node/boot.log" 6>"$node/user-data.rc"
for d in etc var; do
  mkdir -p "$node/$d.up" "$node/$d.work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$node/$d.up,workdir=$node/$d.work" "/$d"
done
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /etc/kk-lab
cp /opt/kk-ami/instance/hardware.json /etc/kk-lab/hardware.json
cp /opt/kk-ami/kit/bin/systemctl /opt/kk-ami/bin/
# Only what the image ships: a userData that needs what this AMI lacks fails as on AWS.
for b in $KK_AMI_BINARIES; do
  case "$b" in
    kubelet) ln -s "$KK_LAB_BIN/lab-kubelet" /opt/kk-ami/bin/kubelet ;;
    containerd) printf '#!/bin/sh\nexec %s containerd "$@"\n' "$KK_LAB_BIN/lab-kubelet" >/opt/kk-ami/bin/containerd ;;
    kubeadm)
      # The real kubeadm. Its SystemVerification preflight reads the host kernel's cgroups:
      # this lab host has cgroup v1, EC2 AMIs have v2, which kubeadm requires since 1.35;
      # that one check is skipped (the image's doing, not the userData's), all others run.
      # shellcheck disable=SC2016 # the $1 and $@ are the wrapper's own
      printf '#!/bin/sh\nif [ "$1" = join ]; then shift; exec %s join --ignore-preflight-errors=SystemVerification "$@"; fi\nexec %s "$@"\n' \
        "$KK_LAB_BIN/kubeadm" "$KK_LAB_BIN/kubeadm" >/opt/kk-ami/bin/kubeadm
      ;;
    aws) ln -s "$KK_LAB_AWS" /opt/kk-ami/bin/aws ;;
    crictl) ln -s "$KK_LAB_CRICTL" /opt/kk-ami/bin/crictl ;;
    *) cp "/opt/kk-ami/kit/bin/$b" /opt/kk-ami/bin/ ;;
  esac
done
chmod +x /opt/kk-ami/bin/*

# No DNS server: the instance resolves its own names and the API server's from /etc/hosts,
# and a lookup of anything else fails at once instead of leaving the lab.
read -r private_ip private_dns instance_id < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["privateIp"], d["privateDnsName"], d["instanceId"])' /opt/kk-ami/instance/instance.json)
echo "nameserver 127.0.0.1" >/etc/resolv.conf
{
  echo "127.0.0.1 localhost"
  echo "$private_ip $private_dns $instance_id"
  echo "$KK_LAB_API_IP $KK_LAB_API_NAME"
} >/etc/hosts
hostname "$private_dns"
rm -rf /etc/kubernetes /var/lib/kubelet /etc/containerd /etc/systemd/system/kubelet.service.d
mkdir -p /etc/kubernetes/manifests /var/lib/kubelet /etc/sysconfig
sysctl -qw net.ipv4.ip_forward=1
ip link set lo up
ip addr add 169.254.169.254/32 dev lo

# Seed failure point "API port blocked": the security group does not admit the API port
# from the nodes (a test switches it on with $KK_LAB_FAULTS/api-port-blocked).
if $api_port_blocked; then
  iptables -A OUTPUT -p tcp -d "$KK_LAB_API_IP" --dport "${KK_LAB_API_PORT:?}" -j REJECT --reject-with tcp-reset
  echo "boot: lab fault: TCP $KK_LAB_API_IP:$KK_LAB_API_PORT blocked" >&5
fi
python3 /opt/kk-ami/kit/imds.py --instance /opt/kk-ami/instance/instance.json >&4 2>&1 &
# What the instance sees: a clean environment, as cloud-init has. AWS_ENDPOINT_URL points
# the aws CLI at moto (the stand-in for AWS's own endpoints); credentials come from IMDS.
instance_env=(env -i HOME=/root LANG=C.UTF-8
  PATH="/opt/kk-ami/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  AWS_ENDPOINT_URL="${KK_LAB_NODE_AWS_ENDPOINT:?}" KK_AMI_DRIVER_VERSION="${KK_AMI_DRIVER_VERSION:-}")
# The image enables containerd at boot.
if [[ " $KK_AMI_BINARIES " == *" containerd "* ]]; then
  "${instance_env[@]}" systemctl enable --now containerd
fi
for _ in $(seq 50); do
  curl -s -o /dev/null --max-time 1 http://169.254.169.254/ && break
  sleep 0.1
done

# cloud-init: run the user data once, its output on the console log. An image with nodeadm
# (EKS AL2023) runs `nodeadm init` at boot, which reads its NodeConfig from the user data
# (cloud-init leaves an application/node.eks.aws part alone); a shell-script user data is
# still cloud-init's to run there.
set +e
if [[ " $KK_AMI_BINARIES " == *" nodeadm "* ]] && [[ "$(head -c 2 /opt/kk-ami/instance/user-data)" != "#!" ]]; then
  echo "boot: nodeadm init" >&3
  "${instance_env[@]}" nodeadm init >&3 2>&1
else
  echo "boot: running user data" >&3
  "${instance_env[@]}" bash /opt/kk-ami/instance/user-data >&3 2>&1
fi
rc=$?
set -e
echo "boot: user data exited $rc" >&3
echo "$rc" >&6
# Stay up while the instance runs: the runner ends this process group to halt it.
exec sleep infinity
