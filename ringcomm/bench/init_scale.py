"""``ringcomm-bench init``: how start-up, the first collective and recovery grow with the job.

    ringcomm-bench init --np 8,16,32,64 --hosts 8 --link-rate 10gbit
    ringcomm-bench init --np 2,4                       # on this host, no namespaces

For each rank count, the ranks start at once (init_worker.py, env://, spread over the namespace
hosts as cluster.py places them) and report, after ringcomm.init():

    init          from the last rank's imports done to every rank's communicator made (the
                  processes' own start, and Python's and numpy's imports, left out: on a busy
                  2-core machine they dominate and are not ringcomm's)
    rendezvous    the part of it until every rank has left the rendezvous (its records read)
    connect       the rest: the shared-memory setup, the measurement of the network between
                  hosts (its two ranks' link), the door published for newcomers; with
                  RINGCOMM_LINKS=at_start, links to every peer on another host too (TCP links
                  are made on first use otherwise: src/transport/tcp/tcp_dialer.h)
    1st allreduce from every rank ready to every rank done, 4 KiB, its schedule's links made
    2nd allreduce the same again, on the links the first made
    RSS, fds      per rank (/proc/self/status, /proc/self/fd), after init; and the most any
                  rank held (rank 0, which also serves the store)
    sockets       per rank, of its descriptors; and after the first all-reduce (its links)
    store reqs    requests the store served, all ranks together (counted by each rank: the
                  server keeps no count)
    sent          bytes each rank's open TCP sockets sent during init (footprint.py), the median
                  rank's (two ranks also measure the network between hosts: megabytes)
    kill -> next  the last rank kills itself (SIGKILL) after a barrier; until every survivor has
                  shrunk and all-reduced again; of which detection (until every survivor's
                  all-reduce has failed) and the shrink (from then until every survivor's
                  Communicator.shrink returned)

then the same ranks' count started with torch.distributed's gloo (init_process_group and one
all-reduce, timed from after torch's import), and a table of each figure's ratio to the first
rank count's: what grows with the job, and how fast. ``--json`` keeps every rank's record;
scale_model.py checks its model against them and projects past this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from ringcomm._ports import free_port
from ringcomm._ranks import start_rank
from ringcomm.bench import cluster, machine, netns, report, table
from ringcomm.bench.arguments import command_line, rank_counts
from ringcomm.bench.cluster import link_rate
from ringcomm.bench.init_columns import COLUMNS

# A rank count's job may take this long, plus this per rank: 64 ranks importing torch at once on
# 2 cores took about a minute.
_BASE_TIMEOUT_S, _PER_RANK_TIMEOUT_S = 60.0, 4.0
_LOG_TAIL = 1500  # characters of each failed rank's log shown


class JobFailedError(RuntimeError):
    """A rank count's job did not finish: which ranks, and the ends of their logs."""


def _peers(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    if any(name != "gloo" for name in names):
        raise argparse.ArgumentTypeError(f"the only peer here is gloo; got {text!r}")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = command_line("ringcomm-bench init", __doc__)
    parser.add_argument(
        "--np", type=rank_counts(2), default=[8, 16, 32, 64], metavar="N,N,...", help="rank counts"
    )
    parser.add_argument(
        "--hosts",
        type=int,
        metavar="H",
        help="spread each job over H namespace hosts (root), or fewer where a job has fewer "
        "ranks; default: every rank on this host",
    )
    parser.add_argument("--link-rate", type=link_rate, metavar="RATE", help="e.g. 10gbit")
    parser.add_argument(
        "--compare", type=_peers, default=["gloo"], metavar="gloo", help="'' for none"
    )
    parser.add_argument(
        "--no-kill", dest="kill", action="store_false", help="skip the kill -> next collective"
    )
    parser.add_argument("--timeout", type=float, help="seconds per job (default 60 + 4 a rank)")
    parser.add_argument("--json", metavar="PATH", help="write every rank's record here")
    return parser


def _placement(nranks: int, hosts: Optional[int]) -> int:
    """How many hosts a job of ``nranks`` spreads over: ``hosts``, or fewer for small jobs (a
    rank each at least); 1 without namespaces."""
    return min(hosts, nranks) if hosts else 1


def _start_local(argv: Sequence[str], nranks: int, env: dict) -> list:
    """Every rank on this host, meeting through env:// on the loopback."""
    port, secret = str(free_port()), secrets.token_hex(16)
    return [
        start_rank(
            [sys.executable, *argv],
            dict(
                env,
                RANK=str(rank),
                WORLD_SIZE=str(nranks),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(nranks),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RINGCOMM_SECRET=secret,
            ),
        )
        for rank in range(nranks)
    ]


def _wait(procs: list, deadline: float, victim: Optional[int]) -> list:
    """Every rank's exit status, or None for those still running at ``deadline`` or when
    another rank failed (the others would wait for it until their own timeout)."""
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        failed = [r for r, code in enumerate(codes) if code not in (None, 0) and r != victim]
        if failed or all(code is not None for code in codes):
            return codes
        time.sleep(0.05)
    return [p.poll() for p in procs]


def run_job(
    library: str, nranks: int, hosts, workdir: Path, kill: bool, timeout: float
) -> list[dict]:
    """One job of ``nranks`` ``library`` ranks (on ``hosts``, a cluster.Cluster, or this host);
    every rank's record, in rank order. Raises JobFailedError with the ranks' logs."""
    out = workdir / f"{library}-{nranks}"
    out.mkdir()
    argv = ["-m", "ringcomm.bench.init_worker", library, str(out / "rank"), "--timeout"]
    argv += [str(timeout)] + (["--kill"] if kill and library == "ringcomm" else [])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    # torch would load ringcomm's backend through its entry point: gloo's ranks need none of it.
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    procs = hosts.start(argv, env) if hosts is not None else _start_local(argv, nranks, env)
    try:
        codes = _wait(procs, time.monotonic() + timeout, victim=nranks - 1 if kill else None)
    finally:
        for p in procs:  # ours alone, by handle: whatever is left after the deadline
            if p.poll() is None:
                p.kill()
                p.wait()
    records, missing = [], []
    for rank in range(nranks):
        path = out / f"rank.{rank}"
        if path.exists():
            records.append(json.loads(path.read_text()))
        else:
            missing.append(rank)
    if missing:
        tails = []
        for rank in missing[:3]:
            log = out / f"rank.{rank}.log"
            text = log.read_text()[-_LOG_TAIL:] if log.exists() else "(no log)"
            tails.append(f"--- {library} rank {rank} (exit {codes[rank]}):\n{text}")
        raise JobFailedError(
            f"{library}, {nranks} ranks: {len(missing)} rank(s) wrote no record "
            f"({missing[:10]}{'...' if len(missing) > 10 else ''})\n" + "\n".join(tails)
        )
    return records


def _mean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else float("nan")


def _requests_by_part(records: list[dict]) -> dict:
    """The store's requests split by what asked: the rendezvous (every rank's record and its
    count, and the records gathered as one), the shared-memory setup among a host's ranks, and
    the rest."""
    parts = {"rendezvous_requests": 0, "shm_requests": 0, "other_requests": 0}
    for record in records:
        for kind, count in record["store_requests_by_key"].items():
            key = kind.split(" ", 1)[1].split("//")[-1]
            if key in ("rank/#", "ranks", "records", "records/all"):
                parts["rendezvous_requests"] += count
            elif key.startswith("shm/"):
                parts["shm_requests"] += count
            else:
                parts["other_requests"] += count
    return parts


def _after_first(ours: list[dict]) -> dict:
    """Sockets a rank holds after the first all-reduce, and the second all-reduce's time (it
    makes no links), where the records have them."""
    if not all("footprint_after_first" in r for r in ours):
        return {}
    reduced = max(r["reduced"] for r in ours)
    return {
        "sockets_after_first": _mean(r["footprint_after_first"]["sockets"] for r in ours),
        "tcp_links_after_first": _mean(
            r["footprint_after_first"]["tcp_sockets"] - r["footprint"]["tcp_sockets"] for r in ours
        ),
        "second_allreduce_ms": (max(r["reduced_again"] for r in ours) - reduced) * 1e3,
    }


def summarize(nranks: int, hosts: int, ours: list[dict], gloo: Optional[list[dict]]) -> dict:
    """One rank count's row: the job's figures from every rank's record (init_worker.py)."""
    last_import = max(r["imported"] for r in ours)
    ready = max(r["ready"] for r in ours)
    met = max(r["met"] for r in ours)
    row = {
        "ranks": nranks,
        "hosts": hosts,
        "init_s": ready - last_import,
        "rendezvous_s": met - last_import,
        "connect_s": ready - met,
        "first_allreduce_ms": (max(r["reduced"] for r in ours) - ready) * 1e3,
        "rss_mib": _mean(r["footprint"]["rss_mib"] for r in ours),
        "fds": _mean(r["footprint"]["fds"] for r in ours),
        "fds_max": max(r["footprint"]["fds"] for r in ours),  # rank 0's: it serves the store
        "sockets": _mean(r["footprint"]["sockets"] for r in ours),
        # TCP links are made on first use: a rank's sockets once its first all-reduce ran.
        **_after_first(ours),
        "remote_peers": _mean(r["remote_peers"] for r in ours),
        "store_requests": sum(r["store_requests"] for r in ours),
        **_requests_by_part(ours),
        "store_request_ms": statistics.median(
            [s for r in ours for s in r["store_request_seconds"]] or [float("nan")]
        )
        * 1e3,
        # The median: two ranks also measure the network between hosts (megabytes), once a job.
        "sent_kib": statistics.median(r["footprint"]["tcp_bytes_sent"] / 1024 for r in ours),
    }
    victims = [r for r in ours if r.get("victim")]
    survivors = [r for r in ours if r.get("victim") is False]
    if victims and survivors and all("recovered" in r for r in survivors):
        killed = victims[0]["killed"]
        row["detect_s"] = max(r["failed"] for r in survivors) - killed
        row["shrink_s"] = max(r["shrunk"] for r in survivors) - max(r["failed"] for r in survivors)
        row["recovery_s"] = max(r["recovered"] for r in survivors) - killed
    if gloo:
        gloo_ready = max(r["ready"] for r in gloo)
        row["gloo_init_s"] = gloo_ready - max(r["imported"] for r in gloo)
        row["gloo_first_allreduce_ms"] = (max(r["reduced"] for r in gloo) - gloo_ready) * 1e3
        row["gloo_rss_mib"] = _mean(r["footprint"]["rss_mib"] for r in gloo)
        row["gloo_sockets"] = _mean(r["footprint"]["sockets"] for r in gloo)
    return row


# Which of the measured table's columns (init_columns.COLUMNS) the ratio table repeats.
RATIO_KEYS = (
    "init_s", "rendezvous_s", "connect_s", "first_allreduce_ms", "rss_mib", "fds", "sockets",
    "sockets_after_first", "store_requests", "rendezvous_requests", "shm_requests", "sent_kib",
    "recovery_s", "gloo_init_s",
)  # fmt: skip


def _cell(value, form: str) -> str:
    if value is None:
        return "-"
    return form.format(int(value) if form == "{:d}" else value)


def measured_table(rows: Sequence[dict]):
    columns = [c for c in COLUMNS if any(c[0] in row for row in rows)]
    made = table.markdown_table([heading for _, heading, _ in columns])
    for row in rows:
        made.add_row(*(_cell(row.get(key), form) for key, _, form in columns))
    return made


def ratio_rows(rows: Sequence[dict]) -> list[dict]:
    """Each figure over the first row's (the smallest job), with the ranks' own ratio."""
    first = rows[0]
    ratios = []
    for row in rows:
        ratio = {"ranks": row["ranks"] / first["ranks"]}
        for key in RATIO_KEYS:
            if key in row and first.get(key):
                ratio[key] = row[key] / first[key]
        ratios.append(ratio)
    return ratios


def ratio_table(rows: Sequence[dict]):
    ratios = ratio_rows(rows)
    headings = {key: heading for key, heading, _ in COLUMNS}
    keys = [key for key in RATIO_KEYS if any(key in ratio for ratio in ratios)]
    made = table.markdown_table(["ranks (x)"] + [headings[key] + " (x)" for key in keys])
    for ratio in ratios:
        made.add_row(f"{ratio['ranks']:.0f}", *(_cell(ratio.get(key), "{:.2f}") for key in keys))
    return made


def growth_lines(rows: Sequence[dict]) -> list[str]:
    """The issue's target: store requests and sockets per rank no faster than the job."""
    if len(rows) < 2:
        return []
    first, last = rows[0], rows[-1]
    grown = last["ranks"] / first["ranks"]
    lines = []
    for key, what in (
        ("store_requests", "store requests"),
        ("rendezvous_requests", "the rendezvous's store requests"),
        ("sockets", "sockets per rank"),
        ("sockets_after_first", "sockets per rank after the first all-reduce"),
    ):
        if key not in first or key not in last:
            continue
        factor = last[key] / first[key]
        verdict = "linear or better" if factor <= grown * 1.05 else "FASTER than linear"
        lines.append(
            f"# {what}: x{factor:.2f} from {first['ranks']} to {last['ranks']} ranks "
            f"(x{grown:.0f}): {verdict}"
        )
    # A job of one rank a host sets up no shared memory, so against it the store's requests in
    # all look faster than linear; a rank's share says whether they grow with the job.
    shares = ", ".join(f"{r['store_requests'] / r['ranks']:.1f} at {r['ranks']}" for r in rows)
    lines.append(f"# store requests a rank: {shares}")
    return lines


def measure(args) -> list[dict]:
    from ringcomm.bench import store_service

    service_us = store_service.service_seconds() * 1e6  # before the jobs, on a quiet machine
    rows = []
    with tempfile.TemporaryDirectory(prefix="ringcomm-bench-init-") as work:
        for nranks in args.np:
            timeout = args.timeout or _BASE_TIMEOUT_S + _PER_RANK_TIMEOUT_S * nranks
            spread = _placement(nranks, args.hosts)
            with contextlib.ExitStack() as stack:
                hosts = None
                if spread > 1:
                    hosts = stack.enter_context(cluster.simulated(spread, nranks, args.link_rate))
                records = {
                    library: run_job(library, nranks, hosts, Path(work), args.kill, timeout)
                    for library in ["ringcomm", *args.compare]
                }
            row = summarize(nranks, spread, records["ringcomm"], records.get("gloo"))
            row["store_service_us"] = service_us
            row["records"] = records
            rows.append(row)
            print(f"# {nranks} ranks done", file=sys.stderr, flush=True)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(sys.argv[2:] if argv is None else argv)
    args = build_parser().parse_args(words)
    out = report.console()
    command = machine.command_line(["init", *words])
    info = machine.describe()
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    out.print(f"# {command}")
    out.print(
        f"# machine: {info['cpu']}, {info['cores']} cores; python {info['python']}; {versions}"
    )
    try:
        rows = measure(args)
    except (JobFailedError, netns.NamespacesUnavailableError) as error:
        print(f"ringcomm-bench init: {error}", file=sys.stderr)
        return 1
    summary = [{k: v for k, v in row.items() if k != "records"} for row in rows]
    report.print_table(out, measured_table(summary))
    out.print(f"# each figure over the {summary[0]['ranks']}-rank job's:")
    report.print_table(out, ratio_table(summary))
    for line in growth_lines(summary):
        out.print(line)
    from ringcomm.bench import scale_model

    for line in scale_model.validation_lines(summary, info["cores"]):
        out.print(line)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"command": command, "machine": info, "rows": rows}, indent=1)
        )
    return 0
