"""One replica group (of one process) of torchft's DDP, as torchft's train_ddp.py example runs it,
on synthetic data: a Manager that asks the Lighthouse for a quorum every step, torchft's DDP
and Optimizer wrappers, and healing through PGTransport (the state sent over the process group).

Every committed step appends a JSON line to --log: the step, the wall time, the quorum's size,
the step's duration and a hash of the parameters and the optimizer's state (two replicas that
committed the same step must have the same hash). bench/torchft_compare.py kills a replica with
SIGKILL and starts it again with the same --replica; it heals from a peer. Each process also
logs its milestones as {"event": ..., "time": ..., "pid": ...}: start (its first line of user
code), imported (torch, torchft), built (model and optimizer), calling (the Manager about to be
made: this replica group joining), manager (made), received (a peer's state loaded: healed),
killed (--die-after).
"""

import time

started = time.time()  # the first line of user code

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from datetime import timedelta  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from heal_model import digest, mlp, sgd  # noqa: E402
from torch import nn, optim  # noqa: E402
from torchft import DistributedDataParallel, Manager, Optimizer  # noqa: E402
from torchft.checkpointing.pg_transport import PGTransport  # noqa: E402
from torchft.local_sgd import DiLoCo, LocalSGD  # noqa: E402

imported = time.time()


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replica", type=int, required=True, help="this replica group's id")
    parser.add_argument("--lighthouse", required=True, help="the Lighthouse's address")
    parser.add_argument("--steps", type=int, default=30, help="stop once this step is committed")
    parser.add_argument("--pg", choices=("ringcomm", "gloo"), default="ringcomm")
    parser.add_argument(
        "--algorithm", choices=("ddp", "localsgd", "diloco"), default="ddp",
        help="torchft's DDP, or LocalSGD / DiLoCo (syncing every 2 local steps)",
    )  # fmt: skip
    parser.add_argument("--compression", default=None, help="ringcomm's wire codec, or none")
    parser.add_argument("--inputs", type=int, default=64, help="the MLP's input width")
    parser.add_argument("--width", type=int, default=256, help="the MLP's hidden width")
    parser.add_argument("--layers", type=int, default=2, help="hidden layers of that width")
    parser.add_argument(
        "--optimizer", choices=("adamw", "sgd"), default="adamw",
        help="sgd: bench/heal.py's (SGD with momentum, heal_model.py)",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=32, help="samples a step")
    parser.add_argument(
        "--no-digest", action="store_true", help="skip the state's hash (timing runs)"
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds of 'compute'")
    parser.add_argument("--min-replicas", type=int, default=1)
    parser.add_argument(
        "--heartbeat-interval-ms", type=int, default=100,
        help="how often the Manager heartbeats to the Lighthouse (torchft's default 100)",
    )  # fmt: skip
    parser.add_argument(
        "--die-after", type=int, default=0,
        help="SIGKILL this process at the start of a step once it has committed this many "
             "steps with --expect replica groups in them",
    )  # fmt: skip
    parser.add_argument("--expect", type=int, default=0, help="the job's full size, replica groups")
    parser.add_argument("--stop-file", help="where a step to stop at is written")
    parser.add_argument(
        "--hostname", help="the address peers reach this replica at (default: the host name)"
    )
    parser.add_argument("--log", required=True, help="a file of one JSON line a committed step")
    return parser.parse_args()


def process_group(args: argparse.Namespace, timeout: timedelta):
    if args.pg == "gloo":
        from torchft.process_group import ProcessGroupGloo

        return ProcessGroupGloo(timeout=timeout)
    from ringcomm.torchft import ProcessGroupRingcomm

    return ProcessGroupRingcomm(timeout=timeout, compression=args.compression)


def stop_at(args: argparse.Namespace) -> int:
    if args.stop_file and os.path.exists(args.stop_file):
        with open(args.stop_file) as f:
            return int(f.read() or args.steps)
    return args.steps


@contextmanager
def training(args, manager: Manager, model: nn.Module, base: optim.Optimizer):
    """(the forward pass, the optimizer to step) of --algorithm."""
    if args.algorithm == "ddp":
        yield DistributedDataParallel(manager, model), Optimizer(manager, base)
    elif args.algorithm == "localsgd":
        with LocalSGD(manager, model, base, sync_every=2):
            yield model, base
    else:
        outer = optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
        with DiLoCo(manager, [model], base, outer, sync_every=2, pin_memory=False):
            yield model, base


def main() -> None:
    args = parse()
    if args.hostname:
        # torchft advertises socket.gethostname() (the Manager's and the reconfigure handle's
        # store addresses), which namespace hosts on one machine share: name this one's own.
        socket.gethostname = lambda: args.hostname
    timeout = timedelta(seconds=args.timeout)
    log = open(args.log, "a")

    def event(name: str, at: float = 0.0) -> None:
        log.write(json.dumps({"event": name, "time": at or time.time(), "pid": os.getpid()}))
        log.write("\n")
        log.flush()

    event("start", started)
    event("imported", imported)
    # Every replica starts from the same model (seed 0; init_sync checks it).
    model = mlp(args.inputs, args.width, args.layers)
    base = sgd(model) if args.optimizer == "sgd" else optim.AdamW(model.parameters(), lr=1e-3)
    event("built")

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        base.load_state_dict(state["optim"])
        event("received")

    def state_dict():
        return {"model": model.state_dict(), "optim": base.state_dict()}

    event("calling")
    pg = process_group(args, timeout)
    # The replica group's own store, as torchrun would serve it (the Manager connects to it).
    group_store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=pg,
        min_replica_size=args.min_replicas,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"replica_{args.replica}",
        store_addr="127.0.0.1",
        store_port=group_store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=args.lighthouse,
        hostname=socket.gethostname(),
        timeout=timeout,
        quorum_timeout=timedelta(seconds=60),
        use_async_quorum=args.algorithm != "diloco",  # DiLoCo asks for a synchronous quorum
        checkpoint_transport=PGTransport(pg, timeout=timeout, device=torch.device("cpu")),
        heartbeat_interval=timedelta(milliseconds=args.heartbeat_interval_ms),
    )
    event("manager")
    criterion = nn.CrossEntropyLoss()
    full_steps = 0
    with log, training(args, manager, model, base) as (forward, optimizer):
        while manager.current_step() < stop_at(args):
            if args.die_after and full_steps >= args.die_after:
                event("killed")
                os.kill(os.getpid(), signal.SIGKILL)
            began = time.perf_counter()
            step = manager.current_step()
            data = torch.Generator().manual_seed(1000 * args.replica + step)
            inputs = torch.randn(args.batch, args.inputs, generator=data)
            labels = torch.randint(10, (args.batch,), generator=data)
            optimizer.zero_grad()
            loss = criterion(forward(inputs), labels)
            if args.step_sleep:
                time.sleep(args.step_sleep)
            loss.backward()
            optimizer.step()
            if manager.current_step() > step:  # committed
                record = {
                    "step": manager.current_step(),
                    "time": time.time(),
                    "seconds": time.perf_counter() - began,
                    "replicas": manager.num_participants(),
                    # LocalSGD and DiLoCo sync the parameters; each replica's inner
                    # optimizer is its own.
                    "digest": ""
                    if args.no_digest
                    else digest(model, base if args.algorithm == "ddp" else None),
                    "pid": os.getpid(),
                }
                log.write(json.dumps(record) + "\n")
                log.flush()
                full_steps += record["replicas"] == args.expect
            elif args.algorithm == "ddp":  # given up: when this replica learned of a failure
                error = manager.errored()
                record = {"failed": True, "time": time.time(), "pid": os.getpid(),
                          "error": str(error)[:300] if error else None}  # fmt: skip
                log.write(json.dumps(record) + "\n")
                log.flush()
    manager.shutdown(wait=False)
    pg.shutdown()


if __name__ == "__main__":
    main()
