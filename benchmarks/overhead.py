"""What the measurements cost: instrumented vs bare step time, in one run.

Each rank holds two copies of the synthetic trainer (same seed: same weights, same
batches, both DDP over the same process group). The *instrumented* one runs as a
campaign job does in its timed window: ``Recorder.begin/mark/end`` around every step
and the all-reduce timed by trainers.comm's DDP hook. The *bare* one runs the same
zero_grad/forward/backward/step with neither. Blocks of ``--steps`` steps alternate
A/B, B/A, ... in the same processes (so drift and neighbours' load hit both alike);
each pair gives the log of the ratio instrumented/bare of its block times (wall clock,
and the rank process's CPU time). Two copies that differ in nothing timed still differ
(their memory, where it lies): so every ``--fresh`` pairs (100) the copies are built anew,
in an order drawn anew, each after an allocation of a size drawn anew, and each *set* of
copies gives the 20 % trimmed mean of its pairs. The trimmed mean of the sets' figures,
with its Tukey-McLaughlin 95 % interval, is the A/B figure: a load spike that hits one
block is trimmed away, and the part of the copies' own difference that moves from build
to build is inside the interval (what does not, the loops' own code, ``--also none``
shows; with fewer than three sets, the pairs' interval, which leaves it out: the line
says so). Pairs are added, 100 at a time, until that interval's half-width is <=
``--target`` (0.5 %: enough to see a 1 % cost; with ``--fresh``, not before three sets),
or ``--pairs`` pairs or ``--max-seconds`` have gone by (the line says which):

    instrumented/bare step time: 1.004 (1,200 pairs over 12 sets of fresh copies; 95% CI over the sets 0.999-1.009 (over the pairs alone 1.001-1.007); half-width 0.48 %, target met; bare 2.95 ms/step; ...)

Each CPU run measures two step sizes (``--presets``): ``3ms`` (a step of ~3 ms here)
and ``15ms`` (~12-15 ms). It also *accounts* for the cost, each part measured on its own
where little else moves, after the A/B blocks:

    accounted: 30.1 us/step = 0.20% of the bare step (Recorder 3.1 us/step + hook 27.0 us/bucket x 1 bucket(s)/step; ...)

- Recorder: ``begin``, four ``mark``s and ``end`` in a loop with nothing else.
- hook: a one-layer DDP model over the same process group (every rank), timed by
  trainers.comm's hook vs DDP's builtin all-reduce, in alternating blocks: the
  20 % trimmed mean of the paired differences, per bucket (its 95% interval is printed).

and says whether the two agree: the accounted share inside the A/B interval, or not
(``DISAGREE``: the A/B sees a cost the parts do not add up to, or less).

FLOP counting (one warm-up iteration) and the profiler window (after the timed
window) are not part of a timed step, so they are in neither figure.

The instrumented copy's all-reduce hook is what a job would take (``--hook``, as
``experiment.comm_hook``: the C++ one on CPU); ``--also python`` adds a copy timed by the
Python hook to every round, over the same bare block: both ratios side by side in one run.

    .venv/bin/python benchmarks/overhead.py                     # 2 CPU ranks, gloo, 3 ms and 15 ms steps
    .venv/bin/python benchmarks/overhead.py --also python       # the C++ and the Python hook side by side
    .venv/bin/python benchmarks/overhead.py --step-ms 2.5       # a model whose bare step is 2.5 ms here
    .venv/bin/python benchmarks/overhead.py --save              # the README's figures
    .venv/bin/python benchmarks/overhead.py --device cuda --ranks 1
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import figure, load_average, save, trimmed_mean_ci
    from _overhead_parts import (CALIBRATION_SIZES, NullRecorder, ab_interval, bare_steps, calibrate,  # noqa: F401
                                 choose_size, config, hook_cost_s, passthrough_hook, per_set, recorder_cost_s)
else:
    from benchmarks._common import figure, load_average, save, trimmed_mean_ci
    from benchmarks._overhead_parts import (CALIBRATION_SIZES, NullRecorder, ab_interval, bare_steps,  # noqa: F401
                                            calibrate, choose_size, config, hook_cost_s, passthrough_hook,
                                            per_set, recorder_cost_s)

CHUNK = 100  # pairs between two looks at the interval


def _rank(rank: int, args) -> None:
    import torch
    import torch.distributed as dist

    from trainers import comm
    from trainers.dist import DistContext
    from trainers.instrument import Recorder
    from trainers.synthetic import SyntheticTrainer

    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = "none"
    if args.ranks > 1:
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=args.ranks)
    ctx = DistContext(rank=rank, world_size=args.ranks, local_rank=rank, local_world_size=args.ranks, num_nodes=1,
                      device=device, backend=backend, emulated=False, host=socket.gethostname())
    if getattr(args, "calibrate", False):  # --step-ms: the size first, then the run on it, in these processes
        found = calibrate(ctx, args)
        size = torch.tensor([found["image_size"]])
        if backend != "none":  # every rank runs on rank 0's answer
            dist.broadcast(size, src=0)
        args.image_size = int(size.item())
        if rank == 0:
            print(_calibrated(args, found), flush=True)
    cfg, plan = config(args)
    rec = (Recorder(device, warmup=0, expected_iterations=(2 * args.pairs + 1) * args.steps)
           if not (args.no_recorder or args.passthrough) else NullRecorder())
    # --also: more instrumented copies, each timed by another hook, in the same rounds
    crecs = {kind: NullRecorder() if kind == "none"  # the control: the instrumented loop, nothing timed (an A/A)
             else Recorder(device, warmup=0, expected_iterations=(2 * args.pairs + 1) * args.steps)
             for kind in args.also}
    logs: dict = {kind: ([], []) for kind in args.also}  # wall and CPU log-ratios over the same bare blocks
    hook_kind: Optional[str] = None
    timer: Any = None

    def stepper(trainer, recorder):
        def run(n: int) -> None:
            for _ in range(n):
                recorder.begin()
                loss = trainer.step(recorder)
                recorder.end(loss, trainer.images_per_step)
        return run

    def build(k: int) -> tuple:
        """The k-th set of copies: bare, instrumented, the --also ones (same seed: same
        weights, same batches), built in an order drawn anew, each after an allocation of a
        size drawn anew (the same on every rank: DDP builds collectively). Two copies that
        differ in nothing timed read apart by their memory and where it lies; new copies
        every --fresh pairs put the part of that which moves from build to build inside the
        interval (what stays, e.g. the loops' own code, the --also none control shows)."""
        import random

        nonlocal hook_kind, timer
        for r in (rec, *crecs.values()):  # the last iteration's spans, to the Recorder
            if getattr(r, "span_source", None) is not None:
                r.take_spans()
        rng = random.Random(k)
        kinds = ["bare", "instrumented", *args.also]
        if k:
            rng.shuffle(kinds)
        made, pads = {}, []
        for kind in kinds:
            if k:
                pads.append(torch.empty(rng.randrange(1, 1 << 14)))  # < 64 KiB: on the heap, not mmap
            made[kind] = SyntheticTrainer(ctx, cfg, plan)
        inst = made["instrumented"]
        if args.passthrough:  # the instrumented copy: a Python hook that times nothing, no Recorder
            inst.model.register_comm_hook(dist.group.WORLD, passthrough_hook())
        elif not args.no_hook:
            timer = comm.attach(inst, rec, hook=args.hook)[0]
            hook_kind = getattr(timer, "kind", "python")
        also = {}
        for kind in args.also:
            if kind != "none":
                comm.attach(made[kind], crecs[kind], hook=kind)
            also[kind] = stepper(made[kind], crecs[kind])
        run_inst = stepper(inst, rec)
        run_bare = bare_steps(made["bare"])
        block(run_bare), block(run_inst)  # warm-up: allocator, DDP bucket rebuild
        for run in also.values():
            block(run)
        return run_bare, run_inst, also, pads

    def block(fn) -> tuple[float, float]:
        """Wall and process CPU seconds (all the rank's threads) of ``args.steps`` steps."""
        if cuda:
            torch.cuda.synchronize(device)
        if backend != "none":
            dist.barrier()  # both ranks start the block together
        t0, c0 = time.perf_counter(), time.process_time()
        fn(args.steps)
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0, time.process_time() - c0

    wall, cpu, bare_s = [], [], []  # per pair: log(instrumented / bare), the bare block's seconds
    sets: list[int] = []  # the pair each set of copies (build) started at
    copies: Optional[tuple] = None
    started, why = time.perf_counter(), ""

    def starts() -> list[int]:
        """Where the sets the figures are taken over start: a last set shorter than half
        of --fresh joins the one before (each set weighs the same)."""
        if len(sets) > 1 and len(wall) - sets[-1] < args.fresh / 2:
            return sets[:-1]
        return sets

    def ab(values: list[float]) -> tuple[float, float, float]:
        """A ratio's (log) estimate and 95 % interval: over the sets of copies where there
        are three or more (each set's trimmed mean of its pairs), else over the pairs."""
        at = starts()
        per = per_set(values, at) if len(at) >= 3 else []
        return trimmed_mean_ci(per if len(per) >= 3 else [v for v in values if v == v])

    def one_round(copies: tuple) -> None:
        """Bare, instrumented, the --also copies; every other round the reverse (each
        copy's position relative to the bare block alternates, as in A/B, B/A)."""
        run_bare, run_instrumented, also, _ = copies
        runs = [run_bare, run_instrumented, *also.values()]
        if len(wall) % 2:
            runs.reverse()
        times = {id(r): block(r) for r in runs}
        b = times[id(run_bare)]
        for (w, c), t in [((wall, cpu), times[id(run_instrumented)]),  # the --also ones over the same bare block
                          *((logs[kind], times[id(run)]) for kind, run in also.items())]:
            w.append(math.log(t[0] / b[0]))
            c.append(math.log(t[1] / b[1]) if t[1] > 0 and b[1] > 0 else float("nan"))
        bare_s.append(b[0])

    while not why:
        for _ in range(min(CHUNK, args.pairs - len(wall))):
            if copies is None or (args.fresh and len(wall) - sets[-1] >= args.fresh):
                copies = None  # nothing else holds the set before: freed before the next is built
                gc.collect()
                copies = build(len(sets))
                sets.append(len(wall))
            one_round(copies)
        # Rank 0 decides whether the interval is narrow enough; every rank follows it (with
        # --fresh, not before there are three sets to take the interval over).
        est, lo, hi = ab(wall)
        half = (math.exp(hi) - math.exp(lo)) / 2 / math.exp(est)
        enough_sets = not args.fresh or len(starts()) >= 3
        why = ("target met" if half <= args.target and enough_sets
               else f"--pairs {args.pairs} reached" if len(wall) >= args.pairs
               else f"--max-seconds {args.max_seconds:g} reached" if time.perf_counter() - started >= args.max_seconds
               else "")
        if backend != "none":
            flag = torch.tensor([1 if why else 0], device=device if backend == "nccl" else "cpu")
            dist.broadcast(flag, src=0)
            why = (why or "rank 0 stopped") if int(flag.item()) else ""
    copies = None
    rec.finish()
    rec.rows()  # resolve what was recorded (after the window in a real job)
    if args.no_hook:
        buckets = 0
    elif args.no_recorder or args.passthrough:  # the hook ran, but nothing kept its spans: count one bucket
        buckets = 1
    else:
        buckets = statistics.median([a["buckets"] for a in rec.allreduce_rows()] or [0])
    # Accounting (module docstring): the Recorder on rank 0 alone (the others wait at the
    # barrier); the hook on every rank at once, over the real process group (on a one-rank
    # group its completion is immediate and its cost looks smaller than it is).
    hook_s, hook_lo, hook_hi = (hook_cost_s(dist.group.WORLD, device, args.accounting_pairs, cpp=hook_kind == "cpp")
                                if buckets and backend != "none" else (0.0, 0.0, 0.0))
    pass_s, pass_lo, pass_hi = (hook_cost_s(dist.group.WORLD, device, args.accounting_pairs, passthrough=True)
                                if buckets and backend != "none" else (0.0, 0.0, 0.0))
    if rank == 0:
        rec_s = recorder_cost_s(device) if not (args.no_recorder or args.passthrough) else 0.0
    if backend != "none":
        dist.barrier()
    if rank == 0:
        step_s = statistics.median(bare_s) / args.steps
        est, lo, hi = (math.exp(v) for v in ab(wall))
        half = (hi - lo) / 2 / est
        _, plo, phi = (math.exp(v) for v in trimmed_mean_ci(wall))
        n_sets = len(starts())
        over = ab_interval(len(wall), n_sets, lo, hi, plo, phi)
        print(f"instrumented/bare step time: {est:.3f} ({over}; "
              f"half-width {100 * half:.2f} %, {why}; bare {step_s * 1e3:.2f} ms/step; "
              f"{args.ranks} rank(s) on {args.device}, width {args.width}, depth {args.depth}, "
              f"{args.batch}x{args.image_size}x{args.image_size} images/rank, {args.steps} step(s) per block; "
              f"the hook: {'passthrough (Python)' if args.passthrough else _mean_path(timer)}; torch {torch.__version__})", flush=True)
        cest, clo, chi = (math.exp(v) for v in ab(cpu))
        print(f"instrumented/bare CPU time:  {cest:.3f} (95% CI {clo:.3f}-{chi:.3f}; "
              f"the rank process's CPU seconds: less sensitive to other load)", flush=True)
        others = {}
        for kind, (awall, acpu) in logs.items():
            oest, olo, ohi = (math.exp(v) for v in ab(awall))
            ocest, oclo, ochi = (math.exp(v) for v in ab(acpu))
            others[kind] = {"ratio": oest, "lo": olo, "hi": ohi, "cpu_ratio": ocest, "cpu_lo": oclo, "cpu_hi": ochi}
            what = "the control (the loop, nothing timed)" if kind == "none" else f"the {kind} hook"
            print(f"  beside it, {what} (--also): step time {oest:.3f} (95% CI {olo:.3f}-{ohi:.3f}), "
                  f"CPU time {ocest:.3f} (95% CI {oclo:.3f}-{ochi:.3f}), over the same bare blocks", flush=True)
        if "none" in logs:  # per round: instrumented over the control, the loop the same in both
            vs = [w - c for w, c in zip(wall, logs["none"][0])]
            vest, vlo, vhi = (math.exp(v) for v in ab(vs))
            others["none"].update(vs_ratio=vest, vs_lo=vlo, vs_hi=vhi)
            print(f"instrumented/control step time: {vest:.3f} (95% CI {vlo:.3f}-{vhi:.3f}; the same loop, one "
                  f"copy timed, one not)", flush=True)
        cost = rec_s + hook_s * buckets
        share = cost / step_s
        print(f"accounted: {cost * 1e6:.1f} us/step = {share * 100:.2f}% of the bare step "
              f"(Recorder {rec_s * 1e6:.1f} us/step + {hook_kind or 'no'} hook {hook_s * 1e6:.1f} us/bucket "
              f"[95% CI {hook_lo * 1e6:.1f}-{hook_hi * 1e6:.1f}] x {buckets:g} bucket(s)/step; "
              f"budget 1%: {'met' if cost <= 0.01 * step_s else 'NOT met'})", flush=True)
        print(f"of the hook: any Python DDP comm hook (one that times nothing) {pass_s * 1e6:.1f} us/bucket "
              f"[95% CI {pass_lo * 1e6:.1f}-{pass_hi * 1e6:.1f}] = {100 * pass_s * buckets / step_s:.2f}% of the bare "
              + (f"step; campaign's C++ timing hook {hook_s * 1e6:.1f} us/bucket instead" if hook_kind == "cpp"
                 else f"step; campaign's timing in it {(hook_s - pass_s) * 1e6:.1f} us/bucket"), flush=True)
        if lo - 1 <= share <= hi - 1:
            verdict = (f"A/B and accounted agree: the accounted {100 * share:.2f} % lies in the A/B's "
                       f"{100 * (lo - 1):+.2f} .. {100 * (hi - 1):+.2f} %")
        else:
            side = "more" if lo - 1 > share else "less"
            verdict = (f"A/B and accounted DISAGREE: the A/B sees {100 * (est - 1):+.2f} % "
                       f"[{100 * (lo - 1):+.2f}, {100 * (hi - 1):+.2f}], {side} than the accounted {100 * share:.2f} % "
                       f"({'a cost the parts leave out, or a difference the machine made between the copies' if side == 'more' else 'the parts overstate it, or the machine favoured the instrumented copy'})")
        print(verdict, flush=True)
        if args.result_file:
            Path(args.result_file).write_text(json.dumps({
                "ratio": est, "lo": lo, "hi": hi, "pairs": len(wall), "sets": n_sets, "pair_lo": plo,
                "pair_hi": phi, "why": why, "cpu_ratio": cest,
                "cpu_lo": clo, "cpu_hi": chi, "step_s": step_s, "accounted_s": cost, "accounted_share": share,
                "recorder_s": rec_s, "hook_s": hook_s * buckets, "passthrough_s": pass_s * buckets, "hook_kind": hook_kind,
                "also": others,
                "agree": lo - 1 <= share <= hi - 1}))
    if backend != "none":
        dist.destroy_process_group()


def _mean_path(timer) -> str:
    """How the timing hook took the mean (trainers/comm.py): the backend's own average or a division."""
    if timer is None:
        return "no hook"
    if getattr(timer, "kind", None) == "cpp":
        return "C++ (trainers.comm_cpp), x 1/world, then SUM"
    avg = getattr(timer, "_avg", None)
    return "backend AVG" if avg else "divide, then SUM" if avg is False else "not run"


PRESETS = {  # CPU step sizes (2 gloo ranks, one thread each; ~ms per step on this machine)
    "3ms": {"width": 8, "depth": 2, "image_size": 16, "batch": 8},
    "15ms": {"width": 16, "depth": 3, "image_size": 32, "batch": 10},
}


_SPAWNS = [0]


def _calibrated(args, found: dict) -> str:
    """The --step-ms line: the image size the calibration chose, and what it tried."""
    return (f"calibrated: --image-size {found['image_size']} gives a {1e3 * found['step_s']:.2f} ms bare step here "
            f"(target {args.step_ms:g} ms; tried " + ", ".join(f"{s}: {1e3 * t:.2f}" for s, t in found["tried"])
            + ")" + ("" if abs(found["step_s"] * 1e3 / args.step_ms - 1) <= 0.2 else
                     "; not within 20 % of it: another --depth, --batch or --width gets nearer"))


def _spawn(args) -> Optional[dict]:
    """Run ``_rank`` on ``args.ranks`` processes (a fresh port each time); rank 0's result."""
    os.environ["MASTER_PORT"] = str(29500 + (os.getpid() + 7 * _SPAWNS[0]) % 1000)
    _SPAWNS[0] += 1
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        args.result_file = fh.name
        if args.ranks == 1:
            _rank(0, args)
        else:
            import torch.multiprocessing as mp

            mp.spawn(_rank, args=(args,), nprocs=args.ranks)
        text = Path(fh.name).read_text()
    return json.loads(text) if text.strip() else None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2, help="DDP ranks (processes); 1: no all-reduce")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--presets", default=None,
                    help=f"CPU step sizes to measure, of {', '.join(PRESETS)} (default: all of them on CPU; "
                         "--width/--depth/--image-size/--batch measure one model instead)")
    ap.add_argument("--pairs", type=int, default=20_000, help="at most this many A/B pairs of blocks")
    ap.add_argument("--target", type=float, default=0.005, help="stop once the A/B interval's half-width is this")
    ap.add_argument("--max-seconds", type=float, default=150.0, help="stop adding pairs after this long (per size)")
    ap.add_argument("--steps", type=int, default=1, help="steps per block")
    ap.add_argument("--accounting-pairs", type=int, default=80,
                    help="pairs of 100-step blocks (hooked, builtin) that time each hook's cost per bucket on a "
                         "one-layer model, for the accounted line (80; its interval is printed)")
    ap.add_argument("--fresh", type=int, default=CHUNK,
                    help=f"new copies every this many pairs ({CHUNK}; 0: one set for the run); with three sets "
                         "or more the interval is over the sets: the copies' difference from build to build inside it")
    ap.add_argument("--width", type=int, default=None, help="synthetic trainer: channels of the first conv (32)")
    ap.add_argument("--depth", type=int, default=None, help="synthetic trainer: conv blocks (3)")
    ap.add_argument("--image-size", type=int, default=None, help="(32)")
    ap.add_argument("--batch", type=int, default=None, help="images per rank per step (8)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--no-hook", action="store_true", help="instrumented without the all-reduce hook (Recorder only)")
    ap.add_argument("--no-recorder", action="store_true", help="instrumented without the Recorder (hook only)")
    ap.add_argument("--passthrough", action="store_true",
                    help="the 'instrumented' copy runs a Python comm hook that times nothing, and no Recorder: "
                         "the A/B of what any Python DDP hook costs (the floor of a hook that times)")
    ap.add_argument("--step-ms", type=float, default=None,
                    help="a model whose bare step is this long here: the image size chosen by timing the bare "
                         "step first (--width 8 --depth 2 --batch 4 unless given; e.g. --step-ms 2.5)")
    ap.add_argument("--label", default=None, help="the figures' name for a --width/--depth/... model (e.g. 2.5ms)")
    ap.add_argument("--hook", choices=("auto", "cpp", "python"), default="auto",
                    help="which timing hook the instrumented copy uses (experiment.comm_hook)")
    ap.add_argument("--also", default="", type=lambda t: [k for k in t.split(",") if k],
                    help="more instrumented copies timed by these hooks (cpp, python), each block beside "
                         "the same bare block: ratios measured side by side; none: a control copy that runs "
                         "the instrumented loop with nothing timed (what two copies differ by untimed)")
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/overhead.json")
    args = ap.parse_args(argv)
    args.calibrate = False
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if any(k not in ("cpp", "python", "none") for k in args.also):
        raise SystemExit(f"error: --also {','.join(args.also)!r}: hooks are cpp and python (none: a control)")
    custom = any(getattr(args, k) is not None for k in ("width", "depth", "image_size", "batch"))
    if any(getattr(args, k) is not None and getattr(args, k) < 1 for k in ("width", "depth", "image_size", "batch")):
        raise SystemExit("error: --width, --depth, --image-size and --batch take whole numbers >= 1")
    if args.accounting_pairs < 3:
        raise SystemExit("error: --accounting-pairs takes 3 pairs or more (fewer give no interval)")
    if args.fresh < 0:
        raise SystemExit("error: --fresh takes a number of pairs >= 1 (0: the same copies all run)")
    if args.presets and (custom or args.step_ms is not None):
        raise SystemExit("error: --presets or --width/--depth/--image-size/--batch/--step-ms, not both")
    if args.step_ms is not None:
        if args.image_size is not None:
            raise SystemExit("error: --step-ms chooses the image size: leave --image-size out")
        if not 0 < args.step_ms < 1e4 or args.device != "cpu":
            raise SystemExit("error: --step-ms takes a step in milliseconds (> 0), on --device cpu")
        args.width = 8 if args.width is None else args.width
        args.depth = 2 if args.depth is None else args.depth
        args.batch = 4 if args.batch is None else args.batch
        # depth - 1 halvings of the image: a smaller one has nothing left to pool
        args.calibration_sizes = [n for n in CALIBRATION_SIZES if n >= 2 ** (args.depth - 1)]
        if not args.calibration_sizes:
            raise SystemExit(f"error: --step-ms with --depth {args.depth}: its images would need more than "
                             f"{CALIBRATION_SIZES[-1]} pixels; take --depth <= 7")
        # the ranks time the bare step on each size first, then run on the one they chose: the
        # same processes (a second start of each would cost more than the calibration)
        args.calibrate = True
        args.label = args.label or f"{args.step_ms:g}ms"
        custom = True
    args.label = args.label or "custom"
    if custom or args.device == "cuda":
        runs = {args.label: {"width": args.width or 32, "depth": args.depth or 3,  # --step-ms: the ranks choose it
                             "image_size": None if args.calibrate else args.image_size or 32, "batch": args.batch or 8}}
    else:
        names = [n.strip() for n in (args.presets or ",".join(PRESETS)).split(",") if n.strip()]
        if not names or any(n not in PRESETS for n in names):
            raise SystemExit(f"error: --presets {args.presets!r}: choose from {', '.join(PRESETS)}")
        runs = {n: PRESETS[n] for n in names}
    load0 = load_average()
    results = {}
    for name, model in runs.items():
        for key, value in model.items():
            setattr(args, key, value)
        results[name] = _spawn(args)
    if args.save:
        figs = []
        for name, r in results.items():
            if r is None:
                continue
            figs += [
                figure(f"{name}.ab", f"{name} steps ({1e3 * r['step_s']:.1f} ms): instrumented/bare step time, "
                       f"A/B ({r['pairs']:,} pairs"
                       + (f" over {r['sets']} sets of fresh copies" if r.get("sets", 1) >= 3
                          else f", {r.get('sets', 1)} set(s) of copies")
                       + f"; {r.get('hook_kind') or 'no'} hook)", [100 * (r["ratio"] - 1)],
                       unit="%", goal="<= 1 %, half-width <= 0.5 %",
                       met=r["ratio"] - 1 <= 0.01 and (r["hi"] - r["lo"]) / 2 / r["ratio"] <= 0.005,
                       note=f"95% CI {100 * (r['lo'] - 1):+.2f} .. {100 * (r['hi'] - 1):+.2f} %"),
                *(figure(f"{name}.ab_{kind}", f"{name} steps: the same with "
                         + ("a control copy that times nothing (A/A)" if kind == "none" else f"the {kind} hook")
                         + ", beside the same bare blocks (--also)", [100 * (o["ratio"] - 1)], unit="%",
                         note=f"95% CI {100 * (o['lo'] - 1):+.2f} .. {100 * (o['hi'] - 1):+.2f} %")
                  for kind, o in (r.get("also") or {}).items()),
                *(figure(f"{name}.ab_vs_control", f"{name} steps: instrumented/control step time (the same loop, "
                         f"one copy timed, one not; --also none)", [100 * (o["vs_ratio"] - 1)], unit="%",
                         note=f"95% CI {100 * (o['vs_lo'] - 1):+.2f} .. {100 * (o['vs_hi'] - 1):+.2f} %")
                  for o in [(r.get("also") or {}).get("none")] if o and "vs_ratio" in o),
                figure(f"{name}.accounted", f"{name} steps: accounted cost (Recorder + hook)",
                       [100 * r["accounted_share"]], unit="%", goal="<= 1 %",
                       # parts that disagree with the A/B decide nothing (a noisy machine's difference)
                       met=r["accounted_share"] <= 0.01 if r["agree"] else None,
                       note="agrees with the A/B" if r["agree"] else "DISAGREES with the A/B"),
            ]
            if "passthrough_s" in r:
                figs += [
                    figure(f"{name}.recorder", f"{name} steps: the Recorder (marks, losses)",
                           [100 * r["recorder_s"] / r["step_s"]], unit="%", goal="<= 1 %",
                           met=r["recorder_s"] <= 0.01 * r["step_s"]),
                    figure(f"{name}.python_hook", f"{name} steps: any Python DDP comm hook (times nothing) over "
                           f"DDP's builtin all-reduce", [100 * r["passthrough_s"] / r["step_s"]], unit="%",
                           note="DDP's price for calling Python per bucket: the floor of a hook that times"),
                ]
                if r.get("hook_kind") == "cpp" and r["agree"]:  # a part the A/B contradicts is noise, not a figure
                    figs.append(figure(f"{name}.cpp_hook", f"{name} steps: campaign's C++ timing hook over DDP's "
                                       f"builtin all-reduce", [100 * r["hook_s"] / r["step_s"]], unit="%",
                                       goal="<= 1 %", met=r["hook_s"] <= 0.01 * r["step_s"]))
                elif r.get("hook_kind") != "cpp":
                    figs.append(figure(f"{name}.timing", f"{name} steps: campaign's timing inside the Python hook",
                                       [100 * (r["hook_s"] - r["passthrough_s"]) / r["step_s"]], unit="%"))
        path = save("overhead", command="python benchmarks/overhead.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                    figures=figs, load_start=load0)
        print(f"saved: {path}")


if __name__ == "__main__":
    main()
