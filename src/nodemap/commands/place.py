"""`nodemap place`: plan data placement across GPUs from access counts."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..placement.planfile import Summary

DESCRIPTION = """\
Place data larger than one GPU across the GPUs of a node by access analysis
(Jaros et al., ACM TOG 2021): chunks sorted by access count, the hottest
replicated on every GPU as far as memory allows, every other accessed chunk
owned by the GPU that reads it most, never-accessed chunks dealt round-robin.
The plan is applied to CUDA managed memory with nodemap.placement.apply."""

EPILOG = """\
examples:
  nodemap place plan --counts counts.npz --budget 60GiB
  nodemap place plan --counts counts.npz --budget 70GiB,70GiB --replicate 5% --chunk 16MiB -o plan.npz
  nodemap place show plan.npz --json

counts.npz holds counts[chunks x GPUs], alloc_sizes and chunk_size; write it
with nodemap.placement.profiler (GPU pre-pass) or AccessCounts.save."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="place_cmd", metavar="ACTION")
    pl = sub.add_parser("plan", help="plan a placement from access counts", epilog=EPILOG)
    pl.add_argument("--counts", required=True, help="access counts file (.npz)")
    pl.add_argument("--budget", required=True,
                    help="bytes each GPU may hold: one size for all (60GiB) or one per GPU (60GiB,70GiB)")
    pl.add_argument("--chunk", help="chunk size (default: the profiled one; must be a multiple of it), e.g. 16MiB")
    pl.add_argument("--replicate", default="auto", help="auto (most that fits), a percentage (5%%) or a size (4GiB)")
    pl.add_argument("--spill", action="store_true", help="put what does not fit in host memory instead of failing")
    pl.add_argument("-o", "--output", help="save the plan (.npz) for nodemap.placement.apply")
    pl.add_argument("--json", action="store_true", help="print the plan summary as JSON")
    sh = sub.add_parser("show", help="summarize a saved plan")
    sh.add_argument("plan", help="plan file (.npz)")
    sh.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(_place_parser=p)


def run(args: argparse.Namespace) -> int:
    from ..errors import NodemapError

    try:
        import numpy  # noqa: F401  the one dependency of place beyond the base install
    except ImportError:
        raise NodemapError("nodemap place needs numpy, which the base install leaves out: "
                           "pip install 'nodemap[place]' (or pip install numpy)") from None
    from ..placement.counts import AccessCounts
    from ..outfile import json_text
    from ..placement.planner import PlacementPlan, Replication, plan_placement
    from ..units import parse_size

    if args.place_cmd is None:
        args._place_parser.print_help()
        return 2
    if getattr(args, "output", None):
        from ..outfile import check

        check(args.output, "--output")  # before the planning work
    if args.place_cmd == "show":
        plan = PlacementPlan.load(args.plan)
    else:  # the options first: their errors cost no file reading
        chunk = parse_size(args.chunk, "--chunk", minimum=1) if args.chunk else 0
        budgets = [parse_size(b, "--budget") for b in args.budget.split(",")]
        replication = Replication.parse(args.replicate)
        ac = AccessCounts.load(args.counts)
        if chunk:
            ac = ac.rechunk(chunk)
        if len(budgets) == 1:
            budgets *= ac.n_gpus
        if len(budgets) != ac.n_gpus:
            raise NodemapError(f"--budget names {len(budgets)} GPUs, the counts have {ac.n_gpus}: give one size or one per GPU")
        plan = plan_placement(ac.layout, ac.counts, budgets, replication, args.spill)
        if args.output:
            plan.save(args.output)
    summary = plan.summary()
    if args.json:
        print(json_text(summary))
    else:
        print(_table(summary))
        if args.place_cmd == "plan" and args.output:
            print(f"saved: {args.output}")
    return 0


def _table(s: Summary) -> str:
    from ..text import table
    from ..units import format_size, gib

    lines = [
        f"chunks: {s.chunks} of {format_size(s.chunk_size)}, data {gib(s.total_bytes)} GiB over {s.gpus} GPUs",
        f"replicated: {s.replicated_chunks} chunks, {gib(s.replicated_bytes)} GiB on every GPU",
    ]
    if s.host_bytes:
        lines.append(f"host (spilled): {gib(s.host_bytes)} GiB")
    rows = [(g, gib(s.budgets[g]), gib(s.bytes_per_gpu[g]), s.owned_chunks_per_gpu[g],
             f"{100 * s.predicted_local_fraction_per_gpu[g]:.2f}%") for g in range(s.gpus)]
    lines.append(table(["GPU", "budget GiB", "used GiB", "owned chunks", "local reads"], rows))
    lines.append(f"predicted local fraction of accesses: {100 * s.predicted_local_fraction:.2f}%")
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines)
