#!/bin/bash

# Parameters
#SBATCH --account='$(touch pwned)'
#SBATCH --array=0-0%1
#SBATCH --comment='a'"'"'; echo foo'
#SBATCH --constraint='a100_80g&ib'
#SBATCH --cpus-per-task=8
#SBATCH --error='<TMP>/it'"'"'s a '"'"'results'"'"' dir #1 $(id)/jobs/20261121-105700-3f2a/%A_%a_0_log.err'
#SBATCH --gpus-per-node=2
#SBATCH --job-name=20261121-105700-3f2a-a_echo_foo-1x2-a100_80g_ib
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --open-mode=append
#SBATCH --output='<TMP>/it'"'"'s a '"'"'results'"'"' dir #1 $(id)/jobs/20261121-105700-3f2a/%A_%a_0_log.out'
#SBATCH --partition='a'"'"'; echo foo'
#SBATCH --qos='`id`'
#SBATCH --signal=USR2@90
#SBATCH --time=90
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output '<TMP>/it'"'"'s a '"'"'results'"'"' dir #1 $(id)/jobs/20261121-105700-3f2a/%A_%a_%t_log.out' --error '<TMP>/it'"'"'s a '"'"'results'"'"' dir #1 $(id)/jobs/20261121-105700-3f2a/%A_%a_%t_log.err' --kill-on-bad-exit=1 <PYTHON> -P -u -m submitit.core._submit '<TMP>/it'"'"'s a '"'"'results'"'"' dir #1 $(id)/jobs/20261121-105700-3f2a'
