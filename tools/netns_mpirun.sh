#!/bin/sh
# mpirun across the test hosts of tools/netns_hosts.sh: Open MPI starts its
# daemons through tools/netns_rsh.sh and both the ranks' traffic (TCP BTL)
# and the daemons' (OOB) are kept to the veth subnet, so every byte between
# hosts crosses the links. Arguments go to mpirun, e.g.
#   sh tools/netns_hosts.sh up 2
#   sh tools/netns_mpirun.sh -H 10.77.0.1:2,10.77.0.2:2 -np 4 luajit examples/distributed/lenet_ddp.lua
# LUA_PATH, LUA_CPATH, OMP_NUM_THREADS and OF_* (those set) go to the ranks.
here=$(cd "$(dirname "$0")" && pwd)
set -- --allow-run-as-root --oversubscribe \
  --mca plm_rsh_agent "$here/netns_rsh.sh" \
  --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
  --mca oob_tcp_if_include 10.77.0.0/24 "$@"
# (only the variables that are set: mpirun warns about the others)
for v in $(env | sed -n 's/^\(OF_[A-Z0-9_]*\|LUA_C\{0,1\}PATH\|OMP_NUM_THREADS\)=.*/\1/p'); do
  set -- -x "$v" "$@"
done
exec mpirun "$@"
