"""bench/time_to_accuracy.py's rows, medians and table, and examples/train.py's arguments for it,
without training: an end-to-end run starts 11 jobs of 2 or more ranks (about 25 s each on 2 busy
cores), too slow for the suite."""

import importlib.util
import sys

import pytest
from harness import REPO


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tta():
    return load("bench/time_to_accuracy.py", "time_to_accuracy")


def run(seconds, steps, accuracy, reached=True, error=None):
    result = {
        "target_reached": reached,
        "seconds_to_target": seconds if reached else None,
        "steps_to_target": steps if reached else None,
        "final_accuracy": accuracy,
        "ms_per_step": 10.0,
    }
    return dict(result, error=error) if error else result


def test_every_row_is_run_and_tabled(tta):
    rows = tta.rows_for(["horovod", "ddp"], list(tta.CODECS), powersgd=4)
    names = [row.name for row in rows]
    assert names == [
        "hvd float32", "hvd fp16", "hvd int8+EF", "hvd fp8+EF",
        "DDP float32", "DDP fp16", "DDP int8+EF", "DDP fp8+EF",
        "DDP PowerSGD r4", "DDP PowerSGD r4 (gloo)", "DDP float32 (gloo)",
    ]  # fmt: skip
    assert rows[-2].train_arguments() == [
        "--api", "ddp", "--compression", "none", "--backend", "gloo", "--powersgd", "4"
    ]  # fmt: skip
    assert "--backend" not in rows[0].train_arguments()  # the Horovod API has no backend
    summaries = {row: tta.summarize([run(2.0 + i, 10 + i, 0.98)]) for i, row in enumerate(rows)}
    cells = tta.table_rows(summaries)
    assert [c[0] for c in cells] == names and all(len(c) == len(tta.COLUMNS) for c in cells)
    by_name = dict(zip(names, cells))
    # Against float32 on ringcomm through the row's own API, and against gloo's float32 (12 s).
    assert by_name["hvd int8+EF"][-2:] == ["2.00", "0.33"]  # 4 s / 2 s, 4 s / 12 s
    assert by_name["DDP PowerSGD r4 (gloo)"][-2:] == ["1.83", "0.92"]  # 11 / 6, 11 / 12


def test_medians_leave_out_failed_runs_and_runs_short_of_the_target(tta):
    short, failed = run(0, 0, 0.90, reached=False), run(1, 1, 1, error="x")
    summary = tta.summarize([run(3.0, 30, 0.97), run(5.0, 50, 0.99), short, failed])
    assert summary == {
        "runs": 4, "failed": 1, "reached": 2, "steps_to_target": 40.0, "seconds_to_target": 4.0,
        "final_accuracy": 0.97, "ms_per_step": 10.0,
    }  # fmt: skip
    row = tta.rows_for(["horovod"], ["none"], powersgd=0)[0]
    none = tta.summarize([run(0, 0, 0.5, reached=False)])
    assert tta.table_rows({row: none})[0][3:6] == ["0/1", "-", "-"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--powersgd", "4"], "--api ddp"),
        (["--api", "ddp", "--powersgd", "2", "--compression", "fp16"], "choose one"),
        (["--api", "ddp", "--backend", "gloo", "--compression", "int8"], "--backend ringcomm"),
    ],
)
def test_train_rejects_what_it_cannot_run(argv, message, monkeypatch, capsys):
    pytest.importorskip("sklearn", reason="the example's data ships with scikit-learn")
    train = load("examples/train.py", "train_example")
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    with pytest.raises(SystemExit):
        train.parse_arguments()
    assert message in capsys.readouterr().err


def test_train_accepts_every_codec_in_both_apis(monkeypatch):
    pytest.importorskip("sklearn", reason="the example's data ships with scikit-learn")
    train = load("examples/train.py", "train_example")
    for api in ("horovod", "ddp"):
        for codec in ("none", "fp16", "bf16", "int8", "fp8"):
            monkeypatch.setattr(sys, "argv", ["train.py", "--api", api, "--compression", codec])
            assert train.parse_arguments().compression == codec
    argv = ["train.py", "--api", "ddp", "--backend", "gloo", "--powersgd", "4", "--json", "x"]
    monkeypatch.setattr(sys, "argv", argv)
    args = train.parse_arguments()
    assert (args.powersgd, args.eval_every) == (4, train.DEFAULT_EVAL_EVERY)
