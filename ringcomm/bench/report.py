"""What the CLI prints (header, one table per implementation, comparison) and saves (--json)."""

from __future__ import annotations

import io
import json
import sys
from typing import Optional, Sequence

from rich.console import Console

from ringcomm.bench import table, timing
from ringcomm.bench.cluster import link_bound
from ringcomm.bench.collectives import REDUCING, limit_formula
from ringcomm.bench.compare import (
    algorithm_rows,
    codec_rows,
    comparison_rows,
    ringcomm_columns,
    turn_rows,
)
from ringcomm.bench.launchers import Outcome
from ringcomm.bench.memory_bandwidth import MemoryBandwidth
from ringcomm.bench.plan import Plan
from ringcomm.bench.sizes import human

_PIPE_WIDTH = 200  # when not a terminal, wide enough that no table column wraps


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else _PIPE_WIDTH
    return Console(file=stream, width=width, highlight=False, markup=False, soft_wrap=True)


def print_table(out: Console, rich_table) -> None:
    """The table as plain Markdown lines, without the blank padding rows rich draws around it.

    At its natural width however narrow the terminal (80 columns, as Open MPI gives rank 0's
    output): rich would cut cells to fit (``10485…`` for 1048576), and a benchmark must never cut
    a number (nccl-tests prints fixed columns whatever the width); a narrow terminal wraps the
    lines instead. And without escape codes, terminal or not: the tables are Markdown, to paste."""
    unbounded = out.options.update_width(1 << 16)  # a measure not clamped to the terminal
    width = max(out.width, out.measure(rich_table, options=unbounded).maximum)
    text = io.StringIO()
    plain = Console(file=text, width=width, color_system=None, highlight=False, markup=False)
    plain.print(rich_table)
    for line in text.getvalue().splitlines():
        if line.strip():
            out.file.write(line.rstrip() + "\n")
    out.file.flush()


def _peer_label(implementation: str, machine: dict) -> str:
    versions = machine.get("versions", {})
    if implementation == "gloo":
        return f"gloo (torch.distributed, torch {versions.get('torch', '?')})"
    if implementation == "mpi":
        return (
            f"mpi (MPICH {versions.get('mpich', '?')} through mpi4py {versions.get('mpi4py', '?')})"
        )
    if implementation == "torch-ringcomm":
        return (
            f"torch-ringcomm (ringcomm {versions.get('ringcomm', '?')} through torch.distributed, "
            f"torch {versions.get('torch', '?')})"
        )
    return f"ringcomm {versions.get('ringcomm', '')}".strip()


def _sizes(sizes: Sequence[int]) -> str:
    if len(sizes) == 1:
        return f"size {human(sizes[0])}"
    return f"{len(sizes)} sizes {human(min(sizes))} .. {human(max(sizes))}"


def _in_turns(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    return f"{','.join(names)} (in turns, in one set of ranks)"


def header_lines(
    command: str, machine: dict, plan: Plan, nranks: int, placement: Optional[str] = None
) -> list[str]:
    """``placement``: where the ranks are (default: all on this host)."""
    versions = ", ".join(f"{k} {v}" for k, v in machine["versions"].items())
    memory = f", {machine['memory_gib']:.1f} GiB" if machine.get("memory_gib") else ""
    op = f", op {plan.op}" if plan.collective in REDUCING else ""
    return [
        f"# {command}",
        f"# machine: {machine['cpu']}, {machine['cores']} cores{memory}; "
        f"python {machine['python']}; {versions}",
        f"# {plan.collective}: {placement or f'{nranks} ranks on one host'}, {plan.dtype}{op}, "
        f"algorithm {_in_turns(plan.algorithms)}, transport {_in_turns(plan.transports)}, "
        f"compression {_in_turns(plan.compressions)}, memory {plan.memory}, "
        f"{_sizes(plan.sizes)}",
    ]


def limit_lines(
    collective: str, nranks: int, bandwidth: Optional[MemoryBandwidth], limit: Optional[float]
) -> list[str]:
    if bandwidth is None:
        return ["# memory bandwidth: not measured (no single-host limit)"]
    return [
        f"# memory bandwidth B_mem: {bandwidth.gbps:.2f} GB/s read+write ({bandwidth.processes} "
        f"processes each updating {human(bandwidth.buffer_bytes)} in place at once, "
        "best of several)",
        f"# single-host limit: {collective} busbw <= {limit_formula(collective)} = "
        f"{limit:.2f} GB/s (p = {nranks}); a DRAM bound: sizes whose buffers fit in cache can "
        f"exceed it",
    ]


def link_lines(collective: str, cluster, limit: Optional[float]) -> list[str]:
    """The simulated cluster's bound, in place of the single-host limit (cluster.link_bound)."""
    if cluster.rate is None or limit is None:
        return ["# link bound: none (links not shaped, or no bound for this collective)"]
    hosts = len(cluster.hosts)
    return [
        f"# link bound: each host's link carries {cluster.rate_text} "
        f"({cluster.rate / 1e9:.3f} GB/s) each way; {collective} busbw <= {limit:.3f} GB/s "
        f"(algbw <= {link_bound(collective, cluster.layout, cluster.rate):.3f}, H = {hosts}); "
        "x/limit below is the share of it"
    ]


def measured_link_line(
    collective: str, hosts: list[int], rate: float, limit: Optional[float]
) -> str:
    """The link bound under a launcher across real hosts, from the link the communicator
    measured (bytes per second each way)."""
    if not rate or limit is None:
        return "# link bound: none (the link was not measured, or no bound for this collective)"
    return (
        f"# link bound: {len(set(hosts))} hosts, each link measured at {rate / 1e9:.3f} GB/s each "
        f"way; {collective} busbw <= {limit:.3f} GB/s; x/limit below is the share of it"
    )


def print_outcome(out: Console, outcome: Outcome, plan: Plan, nranks: int, machine: dict) -> None:
    label = _peer_label(outcome.implementation, machine)
    title = f"\n## {label}: {plan.collective}, {nranks} ranks"
    if outcome.note or not outcome.variants:
        out.print(title)
    if outcome.note:
        out.print(f"note: {outcome.note}")
    varied = plan.varied()
    for variant, rows in (outcome.variants or {"": outcome.rows}).items():
        if not rows:
            continue
        if variant:
            out.print(f"{title}, {varied} {variant}")
        print_table(out, table.results_table(rows))
        out.print(f"# Avg bus bandwidth    : {average_busbw(rows):g}")
    if outcome.variants and varied == "compression":
        print_codecs(out, outcome.variants)
    elif outcome.variants and varied == "transport":
        print_transports(out, outcome.variants)
    elif outcome.variants:
        print_algorithms(out, outcome.variants)
    out.file.flush()


def _turns_heading(what: str, note: str = "") -> str:
    return (
        f"\n## {what} in turns: time (us) per call over {timing.ROUNDS} rounds in which each "
        "runs a loop in turn (the fastest one's median; the others' median ratio to it in the "
        f"same round, times that){note}"
    )


def print_algorithms(out: Console, variants: dict) -> None:
    """The schedules timed in turns, side by side: time per size, and auto against the best."""
    algorithms = list(variants)
    note = ""
    if "auto" in algorithms and len(algorithms) > 1:
        note = (
            "; auto/best = auto's time / the fastest forced schedule's (< 1.05: within 5%); "
            "auto ran = the schedule auto chose"
        )
    out.print(_turns_heading("algorithms", note))
    print_table(out, table.algorithm_table(algorithm_rows(variants), algorithms))


def print_transports(out: Console, variants: dict) -> None:
    """The transports timed in turns (a communicator each, in the same ranks), side by side."""
    out.print(_turns_heading("transports", "; each transport through a communicator of its own"))
    print_table(out, table.turn_table(turn_rows(variants), list(variants)))


def print_codecs(out: Console, variants: dict) -> None:
    """The wire formats timed in turns, side by side: algbw per size, each against float32
    ("none") and fp16 where those ran, and the error each leaves."""
    out.print(
        f"\n## compressions in turns: algbw (GB/s) from the time per call over {timing.ROUNDS} "
        "rounds in which each runs a loop in turn; a/b = a's algbw / b's; relerr = relative L2 "
        "error against the float64 sum"
    )
    print_table(out, table.codec_table(codec_rows(variants), list(variants)))


def _variant_rows(plan: Plan, variants: dict) -> dict:
    varied = plan.varied()
    if varied == "compression":
        return {"codecs": codec_rows(variants)}
    if varied == "transport":
        return {"transports": turn_rows(variants)}
    return {"algorithms": algorithm_rows(variants)}


def average_busbw(rows: Sequence[dict]) -> float:
    """nccl-tests' closing line: the mean busbw (GB/s) over every size of the run."""
    return sum(row["busbw"] for row in rows) / len(rows) if rows else 0.0


def busbw_by_size(outcomes: Sequence[Outcome]) -> dict[str, dict[int, float]]:
    return {o.implementation: {row["size"]: row["busbw"] for row in o.rows} for o in outcomes}


def by_column(outcomes: Sequence[Outcome], plan: Plan) -> list[Outcome]:
    """The outcomes as the comparison's (and the plot's) columns: with several transports,
    ringcomm's becomes one per transport, named by compare.ringcomm_columns ("ringcomm" for the
    first listed, "ringcomm[ucx]" for another), each with that transport's rows."""
    if plan.varied() != "transport":
        return list(outcomes)
    names = dict(zip(plan.transports, ringcomm_columns(plan.transports)))
    columns = []
    for outcome in outcomes:
        if outcome.implementation == "ringcomm" and outcome.variants:
            for transport, rows in outcome.variants.items():
                columns.append(Outcome(names[transport], {"results": rows}))
        else:
            columns.append(outcome)
    return columns


def print_comparison(
    out: Console,
    outcomes: Sequence[Outcome],
    plan: Plan,
    limit: Optional[float],
    limit_name: str = "the single-host limit",
) -> list:
    columns = by_column(outcomes, plan)
    implementations = [o.implementation for o in columns]
    transports = dict(zip(ringcomm_columns(plan.transports), plan.transports))
    # ringcomm's columns that ran (only "ringcomm", with a note, when its run failed)
    references = [name for name in transports if name in implementations]
    rows = comparison_rows(busbw_by_size(columns), limit, references)
    through = ""
    if len(references) > 1:
        through = "; " + ", ".join(
            f"{name} = ringcomm through {transports[name]}" for name in references
        )
    out.print(
        "\n## comparison: busbw (GB/s); ringcomm/peer > 1 means ringcomm is faster; "
        f"x/limit is the share of {limit_name}{through}"
    )
    has_limit = limit is not None
    print_table(out, table.comparison_table(rows, implementations, has_limit, references))
    return rows


def save_json(
    path: str,
    command: str,
    machine: dict,
    plan: Plan,
    nranks: int,
    bandwidth: Optional[MemoryBandwidth],
    limit: Optional[float],
    outcomes: Sequence[Outcome],
    comparison: Optional[list],
) -> None:
    document = {
        "command": command,
        "machine": machine,
        "plan": plan.__dict__,
        "nranks": nranks,
        "memory_bandwidth": None if bandwidth is None else bandwidth.__dict__,
        "limit_busbw": limit,
        "limit_formula": limit_formula(plan.collective),
        "implementations": {
            o.implementation: {
                "results": o.rows,
                "note": o.note,
                "avg_busbw": average_busbw(o.rows) if o.rows else None,
                **(
                    {"variants": o.variants, **_variant_rows(plan, o.variants)}
                    if o.variants
                    else {}
                ),
            }
            for o in outcomes
        },
        "comparison": comparison,
    }
    with open(path, "w") as f:
        json.dump(document, f, indent=1)
