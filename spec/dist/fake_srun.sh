#!/bin/sh
# Used by spec/dist/launcher_spec.lua under mpirun: turns an Open MPI rank
# into what a task of `srun --mpi=pmix` sees -- the SLURM_* variables of a
# step and PMIx's wire-up, without Open MPI's OMPI_COMM_WORLD_* -- then runs
# the command. FAKE_SLURM_PROCID / FAKE_SLURM_TASKS override the rank and
# the task count (to make srun and MPI disagree).
export SLURM_PROCID="${FAKE_SLURM_PROCID:-$OMPI_COMM_WORLD_RANK}"
export SLURM_STEP_NUM_TASKS="${FAKE_SLURM_TASKS:-$OMPI_COMM_WORLD_SIZE}"
export SLURM_LOCALID="$OMPI_COMM_WORLD_LOCAL_RANK" SLURM_NODEID=0 SLURM_STEP_NUM_NODES=1
export SLURM_STEP_ID=0 SLURM_NTASKS="$SLURM_STEP_NUM_TASKS"
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_RANK \
  OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_NODE_RANK OMPI_UNIVERSE_SIZE
exec "$@"
