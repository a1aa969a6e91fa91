"""A cost model of start-up, the first collective and recovery: its unit costs taken from the
smallest job ``ringcomm-bench init`` measured, checked against the larger ones, then projected
to thousands of ranks, for today's design and the planned one.

    ringcomm-bench init --np 8,16,32,64 --hosts 8 --json init.json
    python -m ringcomm.bench.scale_model init.json --plot docs/_static/init_scale.png

Today (src/bootstrap/rendezvous.cc, src/transport/tcp/tcp_dialer.h): every rank posts its record
to the store and counts it, rank 0 waits for the count, reads them all in one request
(Store.try_get_many) and posts them as one value, which every rank reads: 3N + 3 requests, rank
0 waiting 3 round trips and the store serving them all one after another, and the value of N
records read N times through the store's host. TCP links are made on first use
(src/transport/tcp/tcp_dialer.h): none at creation (but the two ranks that measure the network
between hosts); the first collective makes its schedule's (ring neighbours, a tree's partners,
the other hosts' ranks of a rank's slice: at most _SCHEDULE_LINKS), a connect and a handshake
each, and a communicator made by shrink starts with none again. With RINGCOMM_LINKS=at_start
(design "at_start" here; the only way before) each rank connects to every rank on another host
at creation, one after another: N - G links (G ranks a host), each a socket. A host's G ranks
set up their shared memory through the store too: 12G - 1 requests a host as counted here (a
wait is a get per key behind the counting store), the lowest local rank reading every rank's
word and posting the host's verdict (3G^2 + 4G + 1 before, every rank reading every other's).
After a kill the survivors agree (each posts its view to the leader's mailbox, the leader reads
the views in one request a look and writes the decision, which each reads: 2N requests served)
and form a new communicator the same way, through the leader's mailbox,
then commit: each member counts itself there and waits on the count (src/core/forming_store.cc:
2 requests a member, the mailbox serving them one after another), the leader alone asking the
members whether they live. Before, every member asked every other and read each one's "formed":
N^2 requests.

Planned (issue 52): records gathered over the bootstrap in log2(N) rounds of doubling, the store
only posting each rank's address and reading its partners' (2N requests); links to the
bootstrap's log2(N) partners, and those a schedule uses on first use, as today; agreement in
2 log2(N) rounds of a tree.

Unit costs (``Costs``), from the smallest job, each where it is alone:

    store_request_s   a store request's round trip (median of the ranks' sets)
    store_service_s   the store server's time per request, busy (store_service.py): what the
                      whole job's requests cost one after another
    link_s            one link's connect and handshake on a rank's path: what the first
                      all-reduce took beyond the second, over the links it made (with links made
                      at start: the connect phase over its links)
    step_s            one step of a small all-reduce: the second all-reduce (the first, with
                      links made at start) over 2 log2(N) steps
    detect_s          kill -9 to the survivors' failed call (the links' end of file)

On this machine ``cores`` cores run every rank: while all ranks work (connecting, reducing) each
gets cores/N of one, so its steps take max(1, N/cores) times as long. Projected, each rank has a
core. Bytes go at the link's rate: the records' value from the store's host (today), each
rank's records through the doubling rounds (planned).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from ringcomm.bench import report, table
from ringcomm.bench.init_columns import COLUMNS

RECORD_BYTES = 128  # a rank's record: host id (hostname, boot id, netns), address, ports, pid
PROJECTED_RANKS = (1024, 4096, 16384)
PROJECTED_GBIT = (25, 100)
RANKS_PER_HOST = 8  # projected: 8 ranks (GPUs) a host
DESIGNS = ("at_start", "today", "planned")
# Links a rank's schedules use in the planned design, past the bootstrap's log2(N): two ring
# neighbours, a tree's parent and two children.
_SCHEDULE_LINKS = 5
INIT_TARGET_S = 10.0  # issue 52: 4,096 ranks start in under 10 s on 25 Gbit/s hosts
AGREEMENT_TARGET_S = 1.0  # issue 52: detecting a loss and agreeing at 1,000 ranks


@dataclass(frozen=True)
class Costs:
    store_request_s: float
    store_service_s: float
    link_s: float
    step_s: float
    detect_s: float  # with a core a rank (the measured time over the cores' crowding)
    # The rest of the connect phase, where links are made on first use: the measurement of the
    # network between hosts, the door (with every link made at start, link_s holds it).
    setup_s: float = 0.0


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(n)))


def crowding(nranks: int, cores: Optional[int]) -> float:
    """How many ranks share a core (None: a core each): after a kill, every survivor must be
    scheduled before the last one sees its link's end (measured: 0.07 s at 8 ranks on 2 cores,
    0.50 s at 64)."""
    return 1.0 if cores is None else max(1.0, nranks / cores)


def shm_requests(design: str, nranks: int, per_host: int) -> int:
    """The store requests of the hosts' shared-memory setup (a host of one has none)."""
    if per_host < 2:
        return 0
    hosts = math.ceil(nranks / per_host)
    if design != "planned":  # the plan read by each, two phases of a verdict (shm_setup.cc)
        return hosts * (12 * per_host - 1)
    return hosts * (2 * per_host + 1)  # each posts, one gathers and posts all


def store_requests(design: str, nranks: int, per_host: int) -> int:
    """Requests the store serves while the job starts (today's as the benchmark counts them)."""
    # Across hosts, the network's figures: one rank measures and posts them, every rank reads
    # them (N + 3); and the door for newcomers (1).
    settle = (nranks + 3 if nranks > per_host else 0) + 1
    # Today: post and count, rank 0's wait, read of all and post, the others' read of that.
    records = 3 * nranks + 3 if design != "planned" else 2 * nranks  # planned: post, read partners
    return records + shm_requests(design, nranks, per_host) + settle


def links(design: str, nranks: int, per_host: int, after_first_collective: bool = False) -> int:
    """TCP links a rank holds: every rank on another host (at_start); none at creation and its
    schedule's peers after the first collective (today: made on first use); the bootstrap's
    partners, and its schedule's peers after the first collective (planned)."""
    remote = nranks - per_host
    if design == "at_start":
        return remote
    schedule = _SCHEDULE_LINKS if after_first_collective else 0
    if design == "today":
        return min(remote, schedule)
    return min(remote, _log2(nranks) + schedule)


def calibrate(row: dict, cores: int) -> Costs:
    """Unit costs from one measured job (a ``ringcomm-bench init`` row)."""
    n, per_host = row["ranks"], math.ceil(row["ranks"] / row["hosts"])
    s = row["store_request_ms"] / 1e3
    shm_path = shm_requests("today", n, per_host) / per_host * s
    steps = 2 * _log2(n)
    first = row["first_allreduce_ms"] / 1e3
    setup_s = 0.0
    if "second_allreduce_ms" in row:
        # Links made on first use: the first all-reduce made them, the second ran on them.
        second = row["second_allreduce_ms"] / 1e3
        step_s = second / steps
        link_s = max(0.0, first - second) / max(1, links("today", n, per_host, True))
        setup_s = max(0.0, row["connect_s"] - shm_path)
    else:  # a job that made every link at start (RINGCOMM_LINKS=at_start, or before it)
        step_s = first / steps
        link_s = max(0.0, row["connect_s"] - shm_path) / max(1, links("at_start", n, per_host))
    return Costs(
        store_request_s=s,
        store_service_s=row.get("store_service_us", 0.0) / 1e6,
        link_s=link_s,
        step_s=step_s,
        detect_s=row.get("detect_s", 0.0) / crowding(n, cores),
        setup_s=setup_s,
    )


def _start(costs: Costs, design: str, nranks: int, per_host: int, rate: float) -> tuple:
    """(rendezvous, connect) seconds of a job's start."""
    s = costs.store_request_s
    # The server answers the job's requests one after another, however many ask at once.
    served = store_requests(design, nranks, per_host) * costs.store_service_s
    # A rank's share of its host's shared-memory setup, each request a round trip.
    shm = shm_requests(design, nranks, per_host) / max(1, math.ceil(nranks / per_host))
    shm_path = shm / per_host * s
    if design != "planned":
        # Rank 0 waits for the count and reads the N records at once (3 round trips); every rank
        # reads all N from one host.
        rendezvous = max(3 * s, served) + nranks * nranks * RECORD_BYTES / rate
    else:
        # Post an address, read the partners'; log2(N) rounds of doubling, N records each.
        rendezvous = max(2 * s, served) + _log2(nranks) * costs.step_s
        rendezvous += nranks * RECORD_BYTES / rate
    setup = costs.setup_s if design != "at_start" else 0.0
    return rendezvous, links(design, nranks, per_host) * costs.link_s + shm_path + setup


def predict(
    costs: Costs,
    design: str,
    nranks: int,
    per_host: int,
    cores: Optional[int] = None,
    link_bytes_per_s: Optional[float] = None,
) -> dict:
    """Seconds to start, of the first small all-reduce, and from a kill to the survivors' next
    collective (the agreement's share apart); the store's requests and a rank's links.
    ``cores``: the cores all ranks share (None: a core each)."""
    rate = link_bytes_per_s or math.inf
    s, rounds = costs.store_request_s, _log2(nranks)
    rendezvous, connect = _start(costs, design, nranks, per_host, rate)
    # Made when first needed.
    first_links = links(design, nranks, per_host, True) - links(design, nranks, per_host)
    first = 2 * rounds * costs.step_s + first_links * costs.link_s
    survivors = nranks - 1
    detect = costs.detect_s * crowding(nranks, cores)
    if design != "planned":
        # Each survivor posts its view and reads the decision (the leader reads the views in one
        # request a look); the new communicator forms as the job did (the leader's mailbox its
        # store), commits on one count (2 requests a member), the mailbox serving all of them
        # one after another, and its first collective makes its links (on first use).
        agreement = max(3 * s, 2 * survivors * costs.store_service_s)
        rendezvous_again, reconnect = _start(costs, design, survivors, per_host, rate)
        commit = max(2 * s, 2 * survivors * costs.store_service_s)
        reform = rendezvous_again + reconnect + commit + first_links * costs.link_s
    else:
        # A tree's 2 log2(N) rounds; the survivors hold every record already: links only to
        # their new ring and tree neighbours.
        agreement = 2 * rounds * costs.step_s
        reform = _SCHEDULE_LINKS * costs.link_s
    recovery = detect + agreement + reform + 2 * _log2(survivors) * costs.step_s
    return {
        "init_s": rendezvous + connect,
        "rendezvous_s": rendezvous,
        "connect_s": connect,
        "first_allreduce_ms": first * 1e3,
        "recovery_s": recovery,
        "agreement_s": agreement,
        "store_requests": store_requests(design, nranks, per_host),
        "links": links(design, nranks, per_host),
        "links_after_first": links(design, nranks, per_host, after_first_collective=True),
    }


# ---- checked against the measurements -----------------------------------------------------
# (row key, heading, format) of the figures the model predicts: as the measured table has them,
# but for the request count, which the model predicts as a float, and the links, which that table
# does not show.
_MEASURED = {column[0]: column for column in COLUMNS}
_CHECKED = (
    _MEASURED["init_s"],
    _MEASURED["first_allreduce_ms"],
    _MEASURED["recovery_s"],
    ("store_requests", _MEASURED["store_requests"][1], "{:.0f}"),
    ("links", "TCP links/rank after the 1st", "{:.1f}"),
)


def validation_rows(rows: Sequence[dict], cores: int) -> list[dict]:
    """Each measured job beside the model's prediction from the first (smallest) job's costs."""
    costs = calibrate(rows[0], cores)
    checked = []
    for row in rows:
        per_host = math.ceil(row["ranks"] / row["hosts"])
        predicted = predict(costs, "today", row["ranks"], per_host, cores)
        links_after = row.get("tcp_links_after_first", row.get("remote_peers"))
        measured = dict(row, links=links_after)
        predicted = dict(predicted, links=predicted["links_after_first"])
        if "tcp_links_after_first" not in row:  # every link made at start
            predicted = predict(costs, "at_start", row["ranks"], per_host, cores)
        checked.append({"ranks": row["ranks"], "measured": measured, "predicted": predicted})
    return checked


def validation_table(checked: Sequence[dict]):
    headings = ["ranks"]
    for _, name, _ in _CHECKED:
        headings += [f"{name} measured", "predicted"]
    made = table.markdown_table(headings)
    for row in checked:
        cells = [str(row["ranks"])]
        for key, _, form in _CHECKED:
            for side in ("measured", "predicted"):
                value = row[side].get(key)
                cells.append("-" if value is None else form.format(value))
        made.add_row(*cells)
    return made


def validation_lines(rows: Sequence[dict], cores: int) -> list[str]:
    """The model's check, as lines for the benchmark's output (scale_model.py)."""
    if not rows:
        return []
    checked = validation_rows(rows, cores)
    costs = calibrate(rows[0], cores)
    lines = [
        f"# model (ringcomm/bench/scale_model.py), its costs from the {rows[0]['ranks']}-rank "
        f"job on {cores} cores: store request {costs.store_request_s * 1e3:.2f} ms (served in "
        f"{costs.store_service_s * 1e6:.1f} us), link "
        f"{costs.link_s * 1e3:.2f} ms, all-reduce step {costs.step_s * 1e3:.2f} ms, detection "
        f"{costs.detect_s:.3f} s; predicted beside measured:"
    ]
    lines += _rendered(validation_table(checked))
    return lines


def _rendered(rich_table) -> list[str]:
    import io

    out = report.console()
    buffer = io.StringIO()
    out.file = buffer
    report.print_table(out, rich_table)
    return buffer.getvalue().rstrip("\n").split("\n")


# ---- projected -----------------------------------------------------------------------------
def projection_rows(costs: Costs, counts: Sequence[int] = PROJECTED_RANKS) -> list[dict]:
    rows = []
    for gbit in PROJECTED_GBIT:
        for design in DESIGNS:
            for n in counts:
                predicted = predict(costs, design, n, RANKS_PER_HOST, None, gbit * 1e9 / 8)
                rows.append(dict(predicted, ranks=n, gbit=gbit, design=design))
    return rows


def projection_table(rows: Sequence[dict]):
    made = table.markdown_table(
        ["ranks", "link", "design", "store reqs", "TCP links/rank", "init (s)",
         "1st allreduce (ms)", "agreement (s)", "kill -> next (s)"]
    )  # fmt: skip
    for row in rows:
        made.add_row(
            str(row["ranks"]),
            f"{row['gbit']} Gbit/s",
            row["design"],
            str(row["store_requests"]),
            f"{row['links']} ({row['links_after_first']} after the 1st)"
            if row["links_after_first"] != row["links"]
            else str(row["links"]),
            f"{row['init_s']:.2f}",
            f"{row['first_allreduce_ms']:.1f}",
            f"{row['agreement_s']:.3f}",
            f"{row['recovery_s']:.2f}",
        )
    return made


def plot(path: str, measured: Sequence[dict], costs: Costs, cores: int, title: str) -> None:
    """Init and kill -> next collective against ranks: measured here with the model beside it
    (the same hosts and cores), and each design projected at 25 and 100 Gbit/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [2**k for k in range(4, 15)]
    here = [row["ranks"] for row in measured]
    figure, panels = plt.subplots(1, 2, figsize=(11, 4.8))
    for axes, key, label in ((panels[0], "init_s", "init (s)"), (panels[1], "recovery_s",
                             "kill -9 -> survivors' next all-reduce (s)")):  # fmt: skip
        for design, style in (("today", "-"), ("planned", "--")):
            for gbit, width in zip(PROJECTED_GBIT, (3.0, 1.2)):
                rate = gbit * 1e9 / 8
                times = [predict(costs, design, n, RANKS_PER_HOST, None, rate)[key] for n in counts]
                axes.plot(counts, times, style, linewidth=width, label=f"{design}, {gbit} Gbit/s")
        modelled = [
            predict(costs, "today", row["ranks"], math.ceil(row["ranks"] / row["hosts"]), cores)
            for row in measured
        ]
        axes.plot(here, [m[key] for m in modelled], "k:", label="model of the runs here")
        axes.plot(here, [row.get(key) for row in measured], "ko", label="measured here")
        if key == "init_s":
            axes.axhline(INIT_TARGET_S, color="gray", linestyle="-.", label="target: 10 s")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("ranks")
        axes.set_ylabel(label)
        axes.grid(True, alpha=0.3)
    panels[0].legend(fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ringcomm.bench.scale_model", description=__doc__.split("\n")[0]
    )
    parser.add_argument("results", help="ringcomm-bench init --json's file")
    parser.add_argument("--plot", metavar="PNG", help="init against ranks (needs matplotlib)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    saved = json.loads(open(args.results).read())
    rows = [{k: v for k, v in row.items() if k != "records"} for row in saved["rows"]]
    cores = saved["machine"]["cores"]
    out = report.console()
    out.print(f"# from: {saved['command']}")
    for line in validation_lines(rows, cores):
        out.print(line)
    costs = calibrate(rows[0], cores)
    out.print(
        f"# projected, {RANKS_PER_HOST} ranks a host, a core a rank, records of "
        f"{RECORD_BYTES} B; targets: init of 4,096 ranks under {INIT_TARGET_S:.0f} s at 25 "
        f"Gbit/s, agreement at 1,000 ranks under {AGREEMENT_TARGET_S:.0f} s"
    )
    report.print_table(out, projection_table(projection_rows(costs)))
    if args.plot:
        hosts = rows[-1]["hosts"]
        title = (
            f"measured on {hosts} namespace hosts sharing {cores} cores (costs from the "
            f"{rows[0]['ranks']}-rank job); projected: {RANKS_PER_HOST} ranks a host, a core a rank"
        )
        plot(args.plot, rows, costs, cores, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
