"""``campaign trace FILE...``: what a PyTorch profiler trace says, for any trace (a
campaign job's ``<job>_<rank>_trace.json.gz`` or one of your own), from the same
reader the jobs use (campaign_trace, whose docstring defines every figure)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Sequence

from tabulate import tabulate

from campaign.common.errors import ConfigError
from campaign.common.text import printable

NAME_WIDTH = 80  # kernel names are whole C++ signatures: the terminal shows their start


def _ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else round(seconds * 1e3, 3)


def _short(name: str) -> str:
    """A name from the trace (whoever wrote the file chose it) escaped, then cut to NAME_WIDTH."""
    name = printable(name) or ""
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 3] + "..."


def _cell(value):
    """A table cell: text escaped (campaign.common.text.printable), numbers as they are, None as "-"."""
    return "-" if value is None else printable(value)


def summary_rows(figs) -> list[dict]:
    """One row per file and device (a CPU-only trace: one row without a device)."""
    rows = []
    for f in figs:
        base = {"trace": os.path.basename(f.file), "rank": f.rank, "window": f.window_source,
                "span_ms": _ms(f.span_s), "cpu_op_ms": _ms(f.cpu_op_s), "cpu_util": round(f.cpu_utilisation, 3),
                "cpu_busy_cores": round(f.cpu_busy_cores, 3)}
        comm, exposed = f.comm
        if not f.devices:
            rows.append({**base, "device": None, "gpu_busy_ms": None, "gpu_util": None, "kernels": None,
                         "comm_ms": _ms(comm), "exposed_comm_ms": _ms(exposed)})
        for d in f.devices:
            rows.append({**base, "device": f"{d.device}" + (f" ({d.name})" if d.name else ""),
                         "gpu_busy_ms": _ms(d.busy_s), "gpu_util": round(d.utilisation, 3), "kernels": d.kernels,
                         "comm_ms": _ms(d.comm_s if d.comm_s else comm), "exposed_comm_ms": _ms(
                             d.exposed_comm_s if d.comm_s else exposed)})
    return rows


def render(figs, top: int) -> str:
    cols = ["trace", "rank", "device", "window", "span_ms", "gpu_busy_ms", "gpu_util", "cpu_op_ms", "cpu_util",
            "cpu_busy_cores", "comm_ms", "exposed_comm_ms", "kernels"]
    rows = summary_rows(figs)
    parts = [tabulate([[_cell(r[c]) for c in cols] for r in rows], headers=cols,
                      tablefmt="simple", disable_numparse=True)]
    for f in figs:
        if top <= 0:
            break
        if f.top_kernels:
            parts.append(f"\n{printable(f.file)}: top kernels by time")
            parts.append(tabulate([[_ms(k["total_s"]), _cell(k["calls"]), _cell(k["device"]), _short(k["name"])]
                                   for k in f.top_kernels[:top]], headers=["ms", "calls", "device", "kernel"],
                                  tablefmt="simple", disable_numparse=True))
        if f.top_operators:
            by = "device time of their kernels" if f.devices else "self time"
            parts.append(f"\n{printable(f.file)}: top operators by {by}")
            head = (["device_ms"] if f.devices else []) + ["self_ms", "total_ms", "calls", "operator"]
            parts.append(tabulate([([_ms(o["device_s"])] if f.devices else []) + [
                _ms(o["self_s"]), _ms(o["total_s"]), _cell(o["calls"]), _short(o["name"])] for o in f.top_operators[:top]],
                headers=head, tablefmt="simple", disable_numparse=True))
    return "\n".join(parts)


TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(paths: Sequence[str]) -> list[str]:
    """``paths`` with each folder replaced by the trace files in it (``*.json``,
    ``*.json.gz``, sorted; not its subfolders): a profiler's output folder read as it
    wrote it. A folder without one is a one-line error."""
    out = []
    for p in paths:
        if not os.path.isdir(p):
            out.append(p)
            continue
        try:
            found = sorted(str(f) for f in Path(p).iterdir() if f.name.endswith(TRACE_SUFFIXES) and f.is_file())
        except OSError as exc:
            raise ConfigError(f"{p}: cannot list the folder ({exc.strerror or exc})") from None
        if not found:
            raise ConfigError(f"{p}: a folder with no trace file (*.json, *.json.gz) in it; give the trace files")
        out.extend(found)
    return out


def show_traces(paths: Sequence[str], *, as_json: bool = False, top: int = 5) -> int:
    """Print the figures of each trace file; a file that is not a trace is a one-line error."""
    from campaign_trace import TraceError, read_trace

    if top < 0:
        raise ConfigError(f"--top {top}: expected 0 or more")
    try:
        figs = [read_trace(p, top=max(top, 1)) for p in trace_files(paths)]
    except TraceError as exc:
        raise ConfigError(str(exc)) from None
    if as_json:  # data: json's own escapes (ensure_ascii: an ESC byte is written \u001b), valid JSON still
        print(json.dumps([f.to_dict() for f in figs], indent=2, ensure_ascii=True))
    else:
        print(render(figs, top))
    return 0
