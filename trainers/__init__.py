"""Job side of campaign: trainers, their instrumentation and the store writer.

Runs inside a submitit job (SLURM or local, optionally inside a container). Heavy
imports (torch, mmseg, ...) happen here, never in ``campaign``. Nothing in this
package imports ``campaign.launch``.
"""
