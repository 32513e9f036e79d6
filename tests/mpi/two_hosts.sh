#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair run a 2-rank
# `fsdp train --backend mpi` under mpirun over TCP (tests/runtime/test_mpi_hosts.c runs it).
# Usage: two_hosts.sh FSDP_BIN OUT_DIR [fsdp train flags...]; exits 77 where it cannot make
# namespaces (not root, no CAP_NET_ADMIN, no `ip`), so a test can skip.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 FSDP_BIN OUT_DIR [fsdp train flags...]" >&2
    exit 2
fi
bin=$1
out=$2
shift 2
mkdir -p "$out"

# Names carry this shell's pid, so runs side by side never share a namespace or a link; the
# veth ends live in the root namespace for a moment, where names must be unique and at most
# 15 characters ("fsdpa" and a pid of at most 7 digits: 12).
ns_a=fsdp$$a
ns_b=fsdp$$b
if_a=fsdpa$$
if_b=fsdpb$$
# The subnet exists only inside this run's two namespaces, so it may be the same in every run.
ip_a=10.9.0.1
ip_b=10.9.0.2

cleanup() {
    # deleting a namespace deletes the veth end in it, and with it the pair
    ip netns del "$ns_a" 2>/dev/null || true
    ip netns del "$ns_b" 2>/dev/null || true
}

if ! command -v ip >/dev/null 2>&1; then
    echo "two_hosts.sh: no 'ip' command (iproute2): cannot make network namespaces" >&2
    exit 77
fi
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! ip netns add "$ns_a" 2>/dev/null || ! ip netns add "$ns_b" 2>/dev/null; then
    echo "two_hosts.sh: cannot create network namespaces (needs root or CAP_NET_ADMIN)" >&2
    exit 77
fi

ip link add "$if_a" type veth peer name "$if_b"
ip link set "$if_a" netns "$ns_a"
ip link set "$if_b" netns "$ns_b"
ip -n "$ns_a" addr add "$ip_a/24" dev "$if_a"
ip -n "$ns_b" addr add "$ip_b/24" dev "$if_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$if_a" up
ip -n "$ns_b" link set "$if_b" up

# There is no sshd: mpirun starts its daemon on a "host" through this agent (plm_rsh_agent),
# called as `agent HOST COMMAND...`, which runs the command inside that host's namespace.
agent=$out/agent.sh
cat >"$agent" <<AGENT
#!/bin/sh
host=\$1
shift
case \$host in
$ip_a) ns=$ns_a ;;
$ip_b) ns=$ns_b ;;
*) echo "agent.sh: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$agent"

# TCP only: the two namespaces share /dev/shm and the hostname, so shared memory (vader)
# between the "hosts" would be wrong; mpirun's own wiring (oob) stays on the veth too.
mpirun_two() {
    ip netns exec "$ns_a" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun -q -np 2 --host "$ip_a,$ip_b" \
        --oversubscribe --bind-to none --mca plm_rsh_agent "$agent" --mca btl self,tcp \
        --mca btl_tcp_if_include 10.9.0.0/24 --mca oob_tcp_if_include 10.9.0.0/24 "$@"
}

# Each rank's network namespace, so that a caller can see the ranks ran on different "hosts".
mpirun_two sh -c 'echo "rank $OMPI_COMM_WORLD_RANK netns $(readlink /proc/self/ns/net)"' |
    sort
mpirun_two "$bin" train --backend mpi --ranks 2 "$@"
