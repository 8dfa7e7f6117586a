#!/bin/bash

# Parameters
#SBATCH --account=proj42
#SBATCH --array=0-2%3
#SBATCH --constraint=a100_80g
#SBATCH --cpus-per-task=8
#SBATCH --error='<TMP>/results with spaces/jobs/20261121-105700-3f2a/%A_%a_0_log.err'
#SBATCH --exclusive
#SBATCH --gpus-per-node=2
#SBATCH --job-name=20261121-105700-3f2a-a100_nvlink-1x2-a100_80g
#SBATCH --mem=128GB
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --open-mode=append
#SBATCH --output='<TMP>/results with spaces/jobs/20261121-105700-3f2a/%A_%a_0_log.out'
#SBATCH --partition=a100_nvlink
#SBATCH --qos=normal
#SBATCH --reservation='maint window'
#SBATCH --signal=USR2@90
#SBATCH --time=90
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output '<TMP>/results with spaces/jobs/20261121-105700-3f2a/%A_%a_%t_log.out' --error '<TMP>/results with spaces/jobs/20261121-105700-3f2a/%A_%a_%t_log.err' --kill-on-bad-exit=1 apptainer exec --nv --bind '/data/my data' '/images/my image.sif' python -u -m submitit.core._submit '<TMP>/results with spaces/jobs/20261121-105700-3f2a'
