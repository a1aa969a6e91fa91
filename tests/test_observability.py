"""RINGCOMM_DEBUG's log, RINGCOMM_TRACE's Chrome trace and Horovod's timeline
(docs/guides/debugging.md): each launch of ranks checks many things at once."""

import json
import re
from collections import Counter, defaultdict

import pytest
from harness import assert_all_succeeded, run_job

from ringcomm import _core

PREFIX = re.compile(r"^[^:\s]+:(\d+):(\d+) \[([A-Z]+)\] ringcomm: (warning|info|trace): ")


def lines_of(text, level="info"):
    return [line for line in text.splitlines() if f"ringcomm: {level}:" in line]


def test_subsystem_lists_parse_like_nccls():
    assert _core.parse_log_subsystems("ALL") == 0xFFFFFFFF
    algo = _core.parse_log_subsystems("algo")
    both = _core.parse_log_subsystems("ALGO, transport")
    assert algo and both & algo and both != algo
    assert _core.parse_log_subsystems("^ALGO") == 0xFFFFFFFF & ~algo
    assert _core.parse_log_level("info") == _core.LogLevel.INFO
    with pytest.raises(ValueError, match="unknown subsystem 'NET'"):
        _core.parse_log_subsystems("INIT,NET")
    with pytest.raises(ValueError, match="RINGCOMM_DEBUG must be"):
        _core.parse_log_level("LOUD")


def test_levels_subsystems_and_a_rank_that_dies_before_its_trace(tmp_path):
    trace = tmp_path / "trace.json"
    outcomes = run_job(
        4,
        "debug_levels.py",
        ["die"],
        env={"RINGCOMM_TRACE": str(trace), "RINGCOMM_TIMEOUT": "10"},
        per_rank_env={
            0: {"RINGCOMM_DEBUG": "INFO", "RINGCOMM_DEBUG_SUBSYS": "ALGO,TRACE"},
            1: {"RINGCOMM_DEBUG": "WARN"},
            2: {"RINGCOMM_DEBUG": "INFO", "RINGCOMM_DEBUG_SUBSYS": "^ALGO"},
            # rank 3: RINGCOMM_DEBUG unset, and it leaves without shutting down
        },
        deadline=120,
    )
    assert_all_succeeded(outcomes)
    by_rank = {o.rank: o.stderr for o in outcomes}
    # INFO, filtered to ALGO (and TRACE): the schedule per size, with the cost model's estimates.
    info = lines_of(by_rank[0])
    assert info, by_rank[0]
    for line in info:
        match = PREFIX.match(line)
        assert match and match.group(2) == "0" and match.group(3) in ("ALGO", "TRACE"), line
    assert any("allreduce of 8 B" in line and "by the cost model" in line for line in info)
    assert any("estimates ring" in line for line in info), info
    # WARN and unset: nothing but warnings (there are none here).
    assert lines_of(by_rank[1]) == [] and lines_of(by_rank[3]) == []
    assert "ringcomm: warning" not in by_rank[1] + by_rank[3]
    # ^ALGO: everything else, ALGO not.
    subsystems = {PREFIX.match(line).group(3) for line in lines_of(by_rank[2])}
    assert {"INIT", "TRANSPORT"} <= subsystems and "ALGO" not in subsystems, by_rank[2]
    # Rank 3 never handed its part over: rank 0 waited its timeout and wrote the others', naming
    # it (and said so, a warning that passes any filter).
    data = json.loads(trace.read_text())
    assert data["otherData"]["missing_ranks"] == [3]
    assert {e["pid"] for e in data["traceEvents"]} == {0, 1, 2}
    assert "without rank(s) 3" in by_rank[0]


@pytest.fixture(scope="module")
def horovod_job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("observability")
    outcomes = run_job(
        2,
        "observability.py",
        [str(folder)],
        env={
            "RINGCOMM_DEBUG": "INFO",
            "RINGCOMM_DEBUG_FILE": str(folder / "debug.%h.%p.%r.log"),
            "RINGCOMM_TRACE": str(folder / "trace.json"),
            "HOROVOD_TIMELINE": str(folder / "horovod.json"),
            "RINGCOMM_FUSION_THRESHOLD": str(64 << 20),
        },
        deadline=240,
    )
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
    return folder, outcomes


def test_debug_file_per_rank_with_the_prefix(horovod_job):
    folder, outcomes = horovod_job
    for outcome in outcomes:
        # RINGCOMM_DEBUG_FILE took the lines: stderr has none of them.
        assert lines_of(outcome.stderr) == [], outcome.stderr
        (log,) = folder.glob(f"debug.*.*.{outcome.rank}.log")
        text = log.read_text()
        lines = lines_of(text)
        for line in lines:
            match = PREFIX.match(line)
            assert match and int(match.group(2)) == outcome.rank, line
            assert str(log).split(".")[-3] == match.group(1), (log, line)  # %p is the pid
        said = "\n".join(lines)
        assert "[TRANSPORT]" in said and "shared memory (same host)" in said, said
        assert "[ALGO]" in said and "by the cost model" in said, said
        assert "[INIT]" in said and "timeout 60.0 s" in said, said
        assert "observability worker started" in said and "launched by ringcomm" in said, said
        assert "[AUTH]" in said and "job secret given" in said, said
        assert "[QUEUE]" in said and "tensor queue: cycle every 1.000 ms" in said, said


def test_trace_has_every_rank_and_every_phase(horovod_job):
    folder, _ = horovod_job
    data = json.loads((folder / "trace.json").read_text())
    events = data["traceEvents"]
    assert data["otherData"]["missing_ranks"] == []
    names = defaultdict(Counter)
    for event in events:
        names[event["pid"]][event["name"]] += 1
    assert set(names) == {0, 1}
    for rank in (0, 1):
        process = [e for e in events if e["pid"] == rank and e["name"] == "process_name"]
        assert process and f"rank {rank} (" in process[0]["args"]["name"]
        seen = set(names[rank])
        for phase in (
            "allreduce",
            "allgather",
            "broadcast",
            "wait",
            "reduce",
            "stage",
            "gather",
            "reduce_scatter",
            "codec",
            "copy",
            "negotiate",
            "queue",
            "fusion_copy_in",
            "fusion_copy_out",
            "run",
            "cycle",
        ):
            assert phase in seen, (rank, phase, sorted(seen))
        assert any(n.startswith("rank ") and n.endswith(" ready") for n in seen)
        threads = {
            e["args"]["name"] for e in events if e["pid"] == rank and e["name"] == "thread_name"
        }
        assert {"engine", "tensor queue", "tensor before.big"} <= threads, threads
    for event in events:
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] > 1e15, event  # epoch microseconds
    fused = [e for e in events if e["name"] == "run" and e["args"]["name"] == "before.grads.0"]
    assert fused and fused[0]["args"]["fused"] == 3, fused


def balanced(events):
    depth = Counter()
    for event in events:
        if event["ph"] == "B":
            depth[event["pid"]] += 1
        elif event["ph"] == "E":
            depth[event["pid"]] -= 1
            assert depth[event["pid"]] >= 0, event
    return all(d == 0 for d in depth.values())


def rows(events):
    return {
        e["args"]["name"]: e["pid"]
        for e in events
        if e.get("name") == "process_name" and e["pid"] > 0
    }


def test_horovod_timeline_from_init_until_start_timeline_replaced_it(horovod_job):
    folder, _ = horovod_job
    events = json.loads((folder / "horovod.json").read_text())
    assert events[0]["args"]["start_time_since_epoch_in_micros"] > 0
    names = rows(events)
    assert {"before.grads.0", "before.big", "before.gather", "before.bcast"} <= set(names)
    assert not any(n.startswith(("mid.", "after.")) for n in names), names
    assert balanced(events)
    assert not any(e.get("name") == "CYCLE_START" for e in events)  # not asked for at init
    # A fused all-reduce: Horovod's phases, in order.
    row = [e for e in events if e.get("pid") == names["before.grads.1"] and e["ph"] != "M"]
    sequence = [(e["ph"], e.get("name")) for e in row if e["ph"] != "X"]
    assert sequence == [
        ("B", "NEGOTIATE_ALLREDUCE"),
        ("E", None),
        ("B", "ALLREDUCE"),
        ("B", "QUEUE"),
        ("E", None),
        ("B", "MEMCPY_IN_FUSION_BUFFER"),
        ("E", None),
        ("B", "RINGCOMM_ALLREDUCE"),
        ("E", None),
        ("B", "MEMCPY_OUT_FUSION_BUFFER"),
        ("E", None),
        ("E", None),
    ], sequence
    ticks = sorted(e["name"] for e in row if e["ph"] == "X")
    assert ticks == ["0", "1"], ticks  # each rank's readiness, as rank 0 saw it
    assert row[-1]["args"] == {"dtype": "float32", "shape": "[3, 4]", "fused": 3}
    timestamps = [e["ts"] for e in row]
    assert timestamps == sorted(timestamps)
    # Not fused: no fusion buffer.
    row = [e.get("name") for e in events if e.get("pid") == names["before.gather"]]
    assert "NEGOTIATE_ALLGATHER" in row and "RINGCOMM_ALLGATHER" in row
    assert "MEMCPY_IN_FUSION_BUFFER" not in row


def test_start_and_stop_timeline_mid_run(horovod_job):
    folder, _ = horovod_job
    events = json.loads((folder / "mid.json").read_text())
    names = set(rows(events))
    expected = {f"mid.{n}" for n in ("big", "gather", "bcast", "rs", "a2a")} | {
        f"mid.grads.{i}" for i in range(3)
    }
    assert names == expected, names
    assert balanced(events)
    marks = [e for e in events if e.get("name") == "CYCLE_START"]
    assert marks and all(e["ph"] == "i" and e["s"] == "g" for e in marks)
    kinds = {e.get("name") for e in events}
    assert {"NEGOTIATE_REDUCESCATTER", "RINGCOMM_ALLTOALL", "BROADCAST"} <= kinds, kinds
