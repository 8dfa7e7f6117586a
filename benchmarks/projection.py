"""How good is a projection from a short window? One campaign, two points, side by side.

The same job twice, in one campaign through the real path (launch -> jobs -> store):
the full run (``--iterations`` timed iterations) and a sampled run of it
(``experiment.sample_iterations``: warm-up + ``--sample`` timed iterations). Harvest
projects the sampled run's full training time (campaign/harvest/projection.py); this
prints it beside the measured one, with the ratio, and what the sample cost:

    full run     12.412 s measured (1000 timed iterations, warm-up 0.31 s)
    projection   12.180 s [11.95, 12.41] from 30 of 1000 iterations
    median iteration: full run 12.40 ms, sample 12.17 ms (...)
    ratio projected/measured: 0.981 (error -1.9 %; goal within ±3 %)
    compute spent: 4.1 % of the full run's (warm-up + timed window, GPU-seconds; goal <= 5 %)

Process start-up (Python, torch, the process group) is paid by both runs alike and is
not in either figure. On a shared machine the error moves with the neighbours' load;
run it a few times (or with --trainer sleep, whose law makes it exact up to timer noise).

    .venv/bin/python benchmarks/projection.py                       # synthetic trainer, 1 CPU rank
    .venv/bin/python benchmarks/projection.py --gpus 2 --iterations 2000 --sample 90
    .venv/bin/python benchmarks/projection.py --platform a100 ...    # on a SLURM cluster
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _launch(args, results: Path) -> str:
    from campaign.proc import run

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "CAMPAIGN_"))}
    env["CAMPAIGN_RESULTS"] = str(results)
    overrides = [
        "-m", f"platform={args.platform}", f"trainer={args.trainer}", f"gpus={args.gpus}",
        "experiment=weak_scaling", f"experiment.iterations={args.iterations}",
        f"experiment.warmup_iterations={args.warmup}", f"experiment.sample_iterations=null,{args.sample}",
        "name=projection-benchmark",
    ]
    if args.trainer == "synthetic":
        overrides += [f"trainer.params.width={args.width}", "trainer.params.depth=2", f"dataset.image_size={args.image_size}"]
    launched = run([sys.executable, "-m", "campaign.launch", *overrides], env=env, timeout=300)
    cid = next(line.split()[1].rstrip(":") for line in launched.stdout.splitlines() if line.startswith("campaign "))
    run([sys.executable, "-m", "campaign", "status", cid, "--wait", "--interval", "1"], env=env, timeout=args.timeout)
    return cid


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainer", default="synthetic", choices=("synthetic", "sleep"))
    ap.add_argument("--platform", default="local")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=1000, help="timed iterations of the full run")
    ap.add_argument("--sample", type=int, default=30, help="timed iterations of the sampled run")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up iterations of both runs")
    ap.add_argument("--width", type=int, default=8, help="synthetic trainer: channels of the first conv")
    ap.add_argument("--image-size", type=int, default=16, help="synthetic trainer: image side")
    ap.add_argument("--timeout", type=float, default=3600.0, help="give up waiting after this many seconds")
    ap.add_argument("--results", default=None, help="results folder to keep (default: a temporary one)")
    args = ap.parse_args(argv)

    import polars as pl

    from campaign.harvest.derive import point_frame
    from campaign.store import open_store

    with tempfile.TemporaryDirectory(prefix="projection-bench-") as tmp:
        results = Path(args.results or tmp).resolve()
        cid = _launch(args, results)
        with open_store(f"sqlite:///{results}/campaign.db") as store:
            points = point_frame(store, [cid])
    full = points.filter(~pl.col("projected")).row(0, named=True)
    proj = points.filter(pl.col("projected")).row(0, named=True)
    ratio = proj["time_s"] / full["time_s"]
    spent = (proj["warmup_s"] + proj["sampled_time_s"]) / (full["warmup_s"] + full["time_s"])
    print(f"campaign {cid}: {args.trainer} trainer, {args.gpus} rank(s) on {args.platform}")
    print(f"full run     {full['time_s']:.3f} s measured ({full['timed_iterations']} timed iterations, "
          f"warm-up {full['warmup_s']:.2f} s)")
    print(f"projection   {proj['time_s']:.3f} s [{proj['time_lo_s']:.2f}, {proj['time_hi_s']:.2f}] "
          f"from {proj['timed_iterations']} of {proj['iterations']} iterations")
    print(f"median iteration: full run {1e3 * full['iter_median_s']:.2f} ms, sample {1e3 * proj['iter_median_s']:.2f} ms "
          "(a difference here is the machine changing between the runs)")
    print(f"ratio projected/measured: {ratio:.3f} (error {100 * (ratio - 1):+.1f} %; goal within ±3 %)")
    print(f"compute spent: {100 * spent:.1f} % of the full run's (warm-up + timed window, GPU-seconds; goal <= 5 %)")
    return 0 if abs(ratio - 1) <= 0.03 and spent <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
