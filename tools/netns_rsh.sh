#!/bin/sh
# Open MPI's rsh agent for the test hosts of tools/netns_hosts.sh: runs a
# command "on host" 10.77.0.I (or ofhI) inside the namespace ofhI, as ssh
# would run it on a remote machine (the words joined and parsed by a shell),
# with the host's own name (a UTS namespace whose hostname is ofhI).
#   mpirun --mca plm_rsh_agent tools/netns_rsh.sh -H 10.77.0.1:2,10.77.0.2:2 ...
# ssh-style options before the host (-x, -T, -o X) are accepted and ignored.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=${1:-}
[ $# -ge 2 ] || { echo "usage: netns_rsh.sh HOST COMMAND..." >&2; exit 255; }
shift
case "$host" in
  10.77.0.*) i=${host#10.77.0.} ;;
  ofh*) i=${host#ofh} ;;
  *) i= ;;
esac
case "$i" in
  ''|*[!0-9]*) echo "netns_rsh.sh: $host is not a test host (10.77.0.I or ofhI)" >&2; exit 255 ;;
esac
ns=ofh$i
if ! ip netns list 2>/dev/null | grep -qw "^$ns"; then
  echo "netns_rsh.sh: no namespace $ns (run tools/netns_hosts.sh up N)" >&2
  exit 255
fi
# shellcheck disable=SC2016  # $1 and $* are the inner shell's
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1"; shift; eval "$*"' sh "$ns" "$@"
