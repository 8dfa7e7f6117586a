"""Reading PyTorch profiler traces: one reader for the jobs and for ``campaign trace``.

A neutral package, like ``campaign_sql``: plain Python, no torch, no polars, so both
sides import it (a job turns its own exported trace into its ``profile`` rows; the
host reads any trace a user points it at) and neither side depends on the other.

Input: a chrome trace as ``torch.profiler.profile.export_chrome_trace`` writes it,
``.json`` or ``.json.gz``, one process (one rank) per file. Only the trace format is
read, never torch's profiler objects, which change between versions.

Definitions (per file, i.e. per rank; per device where it says so):

window      the profiled interval every figure is taken over, found in this order:
            1. the ``campaign:profile_window`` annotation a campaign job puts around
               its profiled iterations (device-synchronised at both ends), from its
               start to its end (several: from the first start to the last end);
            2. else torch's ``ProfilerStep#N`` annotations (``profile.step()``), from
               the first one's start to the last one's end: the host's time in the
               profiled steps (device work still running after the last step ends is
               cut off, as much as the first step's device work started late);
            3. else from the start of the first event to the end of the last one,
               the profiler's own span and buffer bookkeeping (categories ``Trace``,
               ``overhead``) left out.
            ``span_s`` is its length. Every interval below is clipped to the window.
busy        per device: the length of the *union* of its kernel, memcpy and memset
            intervals (any stream): time the device did anything.
utilisation busy / span, per device: <= 1 by construction. The reference study's
            GPU utilisation (its eq. 3.3, device time over total time), without the
            double counting a sum of per-operator device times has (a kernel and
            the operator that launched it both carry its time).
cpu_op_s    per host thread, the union of its operator (``cpu_op``) intervals,
            summed over threads (thread-seconds); ``cpu_busy_cores`` = cpu_op_s /
            span, the mean number of busy threads (cores): it passes 1 when several
            threads compute at once, so it is a count of cores, not a utilisation.
cpu_utilisation  the union of every host thread's operator intervals (the time the
            rank's host ran any operator) / span: <= 1 by construction, the host's
            counterpart of the GPU's busy / span.
comm        device: the union of NCCL kernels (``ncclKernel_*``, ``ncclDevKernel_*``);
            exposed: the part of it during which no other kernel ran (memcpy and
            memset are not compute). Host (gloo): the union of ``gloo:*``
            collectives on gloo's threads; exposed: the part during which no operator
            ran on the rank's own threads (collective launches excluded), an
            approximation (intra-op threads are seen only through their operator).
            A window without any collective (one rank, or none traced) has no
            communication figure: absent, not 0.
kernels     kernels with some of their time in the window.
top         kernels by their summed time; operators by the device time of the
            kernels they launched (linked by the trace's ``External id``), or by
            their self time (own time minus nested operators') in a CPU-only trace.
"""

from campaign_trace.analyse import WINDOW_MARK, DeviceFigures, TraceFigures, analyse, profile_row, read_trace
from campaign_trace.load import TraceError, read_json

__all__ = ["WINDOW_MARK", "DeviceFigures", "TraceError", "TraceFigures", "analyse", "profile_row", "read_json",
           "read_trace"]
