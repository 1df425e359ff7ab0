#!/bin/sh
# Test hosts on one machine: network namespaces joined by veth links to a
# bridge, so that mpirun in the root namespace runs ranks "on other hosts"
# and their traffic crosses real (virtual) links that can be cut.
#
#   sh tools/netns_hosts.sh up N     make hosts ofh1..ofhN (10.77.0.1..N/24)
#   sh tools/netns_hosts.sh down     remove them (and any process left in them)
#   sh tools/netns_hosts.sh status   list them
#   sh tools/netns_hosts.sh check    exit 0 if namespaces can be made here
#
# Layout: bridge ofbr0 (10.77.0.254/24) in the root namespace; host i is the
# namespace ofhI with lo up and eth0 = 10.77.0.I/24, the peer of the veth
# ofvI on the bridge. `ip link set ofvI down` cuts host I off.
# Launch across them with tools/netns_rsh.sh as Open MPI's rsh agent and the
# TCP transport restricted to 10.77.0.0/24 (tools/netns_mpirun.sh does both):
#   mpirun --mca plm_rsh_agent tools/netns_rsh.sh -H 10.77.0.1:2,10.77.0.2:2 ...
# Idempotent: `up N` again keeps what exists and adds what is missing.
# Needs root (CAP_NET_ADMIN) and iproute2; `check` says why it cannot run.
set -e
BR=ofbr0
NET=10.77.0
PREFIX=ofh

fail() { echo "netns_hosts: $*" >&2; exit 1; }

need() {
  command -v ip >/dev/null 2>&1 || fail "iproute2 (ip) is not installed"
  [ "$(id -u)" = 0 ] || fail "needs root (CAP_NET_ADMIN) to make network namespaces"
}

# Can namespaces, veth pairs and a bridge be made here? (a throwaway set)
check() {
  need
  probe=ofhprobe$$
  if ! ip netns add "$probe" 2>/dev/null; then
    fail "cannot create network namespaces here (ip netns add failed)"
  fi
  ok=1
  ip link add "${probe}a" type veth peer name "${probe}b" 2>/dev/null || ok=0
  ip link del "${probe}a" 2>/dev/null || true
  ip netns del "$probe" 2>/dev/null || true
  [ "$ok" = 1 ] || fail "cannot create veth links here (ip link add type veth failed)"
  if ! ip link show "$BR" >/dev/null 2>&1; then
    ip link add "${probe}br" type bridge 2>/dev/null || fail "cannot create a bridge here"
    ip link del "${probe}br"
  fi
}

up() {
  n=$1
  case "$n" in ''|*[!0-9]*) fail "up: expected a number of hosts (1..250), got '$n'";; esac
  if [ "$n" -lt 1 ] || [ "$n" -gt 250 ]; then fail "up: expected 1..250 hosts, got $n"; fi
  need
  if ! ip link show "$BR" >/dev/null 2>&1; then
    ip link add "$BR" type bridge
  fi
  ip addr replace "$NET.254/24" dev "$BR"
  ip link set "$BR" up
  i=1
  while [ "$i" -le "$n" ]; do
    ns=$PREFIX$i
    ip netns list | grep -qw "^$ns" || ip netns add "$ns"
    ip -n "$ns" link set lo up
    if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
      ip link del "ofv$i" 2>/dev/null || true
      ip link add "ofv$i" type veth peer name "ofv${i}p"
      ip link set "ofv${i}p" netns "$ns"
      ip -n "$ns" link set "ofv${i}p" name eth0
    fi
    ip link set "ofv$i" master "$BR"
    ip link set "ofv$i" up
    ip -n "$ns" addr replace "$NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    i=$((i + 1))
  done
  # without STP a bridge port forwards as soon as it is up; wait for that
  i=1
  while [ "$i" -le "$n" ]; do
    tries=0
    until bridge link show dev "ofv$i" 2>/dev/null | grep -q 'state forwarding'; do
      tries=$((tries + 1))
      [ "$tries" -lt 50 ] || fail "up: the bridge port ofv$i does not forward"
      sleep 0.1
    done
    i=$((i + 1))
  done
  status
}

# Every process still in one of our namespaces (by pid, from ip netns pids)
kill_left() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}[0-9][0-9]*\$"); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -9 "$pid" 2>/dev/null || true
    done
  done
}

down() {
  need
  kill_left
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}[0-9][0-9]*\$"); do
    ip netns del "$ns" 2>/dev/null || true
  done
  for v in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^ofv[0-9][0-9]*$'); do
    ip link del "$v" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
}

status() {
  found=0
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}[0-9][0-9]*\$" | sort -V); do
    i=${ns#"$PREFIX"}
    state=$(ip -br link show "ofv$i" 2>/dev/null | awk '{print $2}')
    echo "$ns $NET.$i link ${state:-missing}"
    found=1
  done
  [ "$found" = 1 ] || echo "no test hosts"
}

case "${1:-}" in
  up) up "${2:-}" ;;
  down) down ;;
  status) status ;;
  check) check ;;
  *) echo "usage: $0 up N | down | status | check" >&2; exit 2 ;;
esac
