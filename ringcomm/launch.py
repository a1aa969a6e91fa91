"""Starts N ranks of a Python program, like mpirun, with no MPI needed: on this machine, or on
several hosts over ssh as horovodrun does.

    ringcomm-run -np 4 train.py --epochs 3
    ringcomm-run -np 4 python train.py --epochs 3     # as mpirun and horovodrun take it
    python -m ringcomm.launch -np 4 -m mypackage.worker
    ringcomm-run -np 8 -H node1:4,node2:4 train.py    # or --hostfile (ringcomm/_hostlist.py)

A rank on another host starts through ``ssh HOST`` (ringcomm/_remote.py), which gets the job, its
environment and secret on its standard input, never on a command line; the hosts need the same
Python environment at the same path, as mpirun assumes.

The launcher serves the rendezvous store itself and passes its address in RINGCOMM_STORE. It
also sets what torch.distributed's env:// rendezvous reads (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as torchrun does, so init_process_group() works
under it too. Each rank runs in a session of its own, as under mpiexec and torchrun
(ringcomm/_ranks.py). If one rank fails, the others are stopped (after a grace period, so they
can report the failure themselves), and the launcher exits with the failing rank's status;
with --keep-survivors they go on, as a job that shrinks its communicator wants, and with
--replace a lost rank's process is started again, to join the job in place: on its host, or on
a spare slot (those of -H or --hostfile beyond -np) where its host is unreachable or lost all its
ranks (_hostlist.Slots).

SIGTERM, SIGHUP and SIGINT (what timeout, Slurm, Kubernetes and a terminal send) are passed on to
every rank; ranks still running after the grace period are killed, and the launcher exits with
128 + the signal's number. It never leaves ranks behind.

Elastic jobs, with Horovod's flags (ringcomm/elastic/driver.py):

    ringcomm-run -np 2 --min-np 1 --max-np 4 --host-discovery-script ./hosts.sh train.py

run between --min-np and --max-np workers on the slots the script prints (``host:slots`` lines;
a host other than this machine over ssh), re-running it every second.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import time
from typing import Optional, Sequence

from ringcomm import _core, _host, _hostlist, _secret
from ringcomm._ports import free_port
from ringcomm._ranks import RANK_VARIABLES
from ringcomm._remote import DEFAULT_SSH, RemoteRank, Ssh, start_on

# Signals the launcher passes on to its ranks.
_FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# Ranks still running this long after another failed (or after a signal was passed on) are
# terminated: long enough for them to notice the failure through the transport and print their
# own error, or to act on the signal.
_GRACE_SECONDS = 10.0


def _serve_store(base: dict, address: str = "127.0.0.1"):
    """(the job's secret, a store server for the job): the user's secret (RINGCOMM_SECRET /
    _FILE), or a fresh one in the ranks' environment, which only this user's processes can
    read; RINGCOMM_STORE tells the ranks where the store is. ``address``: where ranks reach it
    (an address of this machine; the server listens on every interface where it is not a
    loopback one, as ranks on several hosts reach it through theirs)."""
    secret = base.get("RINGCOMM_SECRET", "").encode() or _core.Config.from_environment().secret
    if not secret:
        secret = _secret.new_secret()
        base["RINGCOMM_SECRET"] = secret.decode()
    loopback = address.startswith("127.") or address == "::1"
    server = _core.TcpStoreServer(address if loopback else "0.0.0.0", 0, secret)
    base["RINGCOMM_STORE"] = f"{address}:{server.port}"
    return secret, server


def spawn(
    nranks: int,
    command: Sequence[str],
    env: Optional[dict] = None,
    grace: float = _GRACE_SECONDS,
    keep_survivors: bool = False,
    hosts: Optional[Sequence[tuple[str, int]]] = None,
    ssh: Ssh = DEFAULT_SSH,
    replacements: int = 0,
) -> int:
    """Runs ``command`` as ``nranks`` ranks; returns the job's exit status (0 if all succeeded;
    with ``keep_survivors``, 0 if any rank ran to a successful end: see _supervise). ``hosts``:
    [(host, slots)] to place them on (ringcomm/_hostlist.py), this machine where not given; the
    slots beyond ``nranks`` are spares. ``replacements``: how many lost ranks' processes may be
    started again, to join the running job in place (RINGCOMM_JOIN=1; implies
    ``keep_survivors``): on the lost one's host, or on a spare slot where that host is
    unreachable or lost all its ranks (_hostlist.Slots)."""
    if nranks < 1:
        raise ValueError(f"-np must be at least 1; got {nranks}")
    hosts = list(hosts or [("localhost", nranks)])
    slots = _hostlist.Slots(hosts, nranks)
    placements = slots.initial
    # Hosts that may run a process of the job: a replacement may go to any listed host.
    used = [h for h, _ in hosts] if replacements > 0 else [p.host for p in placements]
    remote = [host for host in used if not _host.is_local_host(host)]
    # Every rank reaches the store, and the others, through the address on the way to the
    # other hosts: a rank here that met through 127.0.0.1 would listen where none can call it.
    address = _host.address_towards(remote[0]) if remote else "127.0.0.1"
    base = dict(os.environ if env is None else env)
    secret, server = _serve_store(base, address)
    base["RINGCOMM_WORLD_SIZE"] = str(nranks)
    # torch.distributed's env:// convention, as torchrun sets it (rank 0 serves torch's store).
    base.update(
        WORLD_SIZE=str(nranks),
        MASTER_ADDR=address if placements[0].host not in remote else placements[0].host,
        MASTER_PORT=str(free_port()),
    )
    children: list = []
    signals = _SignalsToForward()

    def start(placement: _hostlist.Placement, rank: Optional[int]):
        """A process at ``placement``: rank ``rank``, or (None) one that asks to join, whose
        rank comes from the members, not from the launcher."""
        child_env = dict(
            base,
            RINGCOMM_LOCAL_RANK=str(placement.local_rank),
            RINGCOMM_LOCAL_WORLD_SIZE=str(placement.local_size),
            LOCAL_RANK=str(placement.local_rank),
            LOCAL_WORLD_SIZE=str(placement.local_size),
        )
        if rank is None:
            child_env["RINGCOMM_JOIN"] = "1"
        else:
            child_env.update(RINGCOMM_RANK=str(rank), RANK=str(rank))
        if placement.host in remote:  # the store on the way to that host
            child_env["RINGCOMM_STORE"] = f"{_host.address_towards(placement.host)}:{server.port}"
        return start_on(placement.host, command, child_env, ssh)

    try:
        for rank, placement in enumerate(placements):
            children.append(start(placement, rank))
        healer = _Healer(slots, replacements, start) if replacements > 0 else None
        return _supervise(children, grace, signals, keep_survivors or replacements > 0, healer)
    finally:
        signals.restore()
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        server.stop()


class _Healer:
    """--replace: starts a process in place of each one lost, to join the job, at most
    ``allowed`` times; where, _hostlist.Slots decides. A replacement that could not start
    (its host unreachable, its status one of _hostlist.UNREACHED) is tried again at once on the
    next slot, without counting once more: each such try marks a host failed, so they end."""

    def __init__(self, slots: _hostlist.Slots, allowed: int, start):
        self._slots = slots
        self._left = allowed
        self._allowed = allowed
        self._start = start  # (placement, None) -> a process asking to join there
        self._placements = list(slots.initial)  # each child's
        self._stands_for = list(range(len(slots.initial)))  # the rank each child carries on

    def name(self, index: int) -> str:
        """How the launcher names child ``index``: the rank it started as, or the replacement
        (whose rank the members give)."""
        if index < len(self._slots.initial):
            return f"rank {index}"
        return f"process {index} (in place of rank {self._stands_for[index]})"

    def after(self, children: list, ended: Sequence[int]) -> list[str]:
        """Frees the slots of the children ``ended``, starts a replacement (appended to
        ``children``) for each one lost; what to say of it."""
        said = []
        lost = [i for i in ended if children[i].returncode != 0]
        marked = self._slots.end(
            [
                (self._placements[i], children[i].returncode, isinstance(children[i], RemoteRank))
                for i in ended
            ]
        )
        for host in marked:
            if host in self._slots.failed:
                said.append(
                    f"host {host} counts as failed ({self._slots.failed[host]}): no more "
                    "processes go there (--replace)"
                )
            else:
                said.append(
                    f"host {host} is avoided ({self._slots.avoided[host]}): replacements go to "
                    "other hosts' free slots while there are any (--replace)"
                )
        for index in lost:
            code = children[index].returncode
            retry = index >= len(self._slots.initial) and code in _hostlist.UNREACHED
            retry = retry and isinstance(children[index], RemoteRank)
            what = (
                f"{self.name(index)} could not start on {self._placements[index].host} "
                f"(status {code})"
                if retry
                else f"{self.name(index)} exited with status {code}; the other ranks go on"
            )
            if not retry and self._left <= 0:
                said.append(
                    f"{what}, with no replacement: all {self._allowed} that --replace allows "
                    "were started (--keep-survivors)"
                )
                continue
            started = self._replace(index, children)
            if started is None:
                hosts = ", ".join(self._slots.failed) or "none"
                said.append(
                    f"{what}, with no replacement for rank {self._stands_for[index]}: no slot is "
                    f"left on a host that has not failed (failed: {hosts}) (--keep-survivors)"
                )
                continue
            if not retry:
                self._left -= 1
            said.append(
                f"{what}, and process {started} on {self._placements[started].host} "
                f"(local rank {self._placements[started].local_rank}) replaces it (--replace)"
            )
        return said

    def _replace(self, index: int, children: list) -> Optional[int]:
        """Starts a process in place of child ``index`` on the slot Slots gives; its index, or
        None where no slot is left. A host no route leads to fails at once."""
        while True:
            placement = self._slots.take(self._placements[index])
            if placement is None:
                return None
            try:
                process = self._start(placement, None)
            except ValueError as error:  # no address on the way to it (_host.address_towards)
                self._slots.refuse(placement, str(error))
                print(
                    f"ringcomm-run: host {placement.host} counts as failed ({error}): no more "
                    "processes go there (--replace)",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            children.append(process)
            self._placements.append(placement)
            self._stands_for.append(self._stands_for[index])
            return len(children) - 1


def spawn_elastic(
    command: Sequence[str],
    discovery_script: str,
    start_np: int,
    min_np: int,
    max_np: int,
    slots_per_host: Optional[int] = None,
    elastic_timeout: Optional[float] = None,
    reset_limit: Optional[int] = None,
    cooldown_range: Optional[tuple] = None,
    env: Optional[dict] = None,
    grace: float = _GRACE_SECONDS,
    verbose: bool = False,
    ssh: Ssh = DEFAULT_SSH,
) -> int:
    """Runs ``command`` as an elastic job (ringcomm/elastic/driver.py); returns its status.
    Workers on hosts other than this machine start over ``ssh``."""
    from ringcomm.elastic import discovery, driver

    if not 1 <= min_np <= start_np <= max_np:
        raise ValueError(
            f"elastic jobs need 1 <= --min-np <= -np <= --max-np; got --min-np {min_np}, "
            f"-np {start_np}, --max-np {max_np}"
        )
    if cooldown_range is not None:
        discovery.check_cooldown_range(cooldown_range)
    base = {
        k: v
        for k, v in (os.environ if env is None else env).items()
        # What a launcher above ours may have set, which an elastic worker must not mistake
        # for its rank.
        if k not in RANK_VARIABLES
    }
    # On every interface: hosts may be discovered later; each worker is told the address on
    # the way to its host (driver.py).
    secret, server = _serve_store(base, "0.0.0.0")
    signals = _SignalsToForward()
    try:
        store = _core.TcpStore("127.0.0.1", server.port, 30.0, secret)
        hosts = discovery.HostManager(
            discovery.HostDiscoveryScript(discovery_script, slots_per_host), cooldown_range
        )
        return driver.ElasticDriver(
            hosts,
            list(command),
            base,
            store,
            start_np=start_np,
            min_np=min_np,
            max_np=max_np,
            timeout=driver.default_timeout() if elastic_timeout is None else elastic_timeout,
            reset_limit=reset_limit,
            grace=grace,
            signals=signals,
            verbose=verbose,
            ssh=ssh,
            store_port=server.port,
        ).run()
    finally:
        signals.restore()
        server.stop()


class _SignalsToForward:
    """Catches the signals the launcher passes on, for _supervise to act on (a handler only notes
    them: the supervising loop does the rest)."""

    def __init__(self):
        self.received: list[int] = []
        self._previous = {}
        for number in _FORWARDED:
            try:
                self._previous[number] = signal.signal(number, self._note)
            except ValueError:  # not the main thread: the caller keeps its own handling
                pass

    def _note(self, number, frame) -> None:
        self.received.append(number)

    def restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)


def _supervise(
    children,
    grace: float,
    signals: _SignalsToForward,
    keep_survivors: bool = False,
    healer: Optional[_Healer] = None,
) -> int:
    """Waits for the ranks. A failed rank ends the job: the others are stopped after `grace`.
    With `keep_survivors` they go on instead (they may shrink their communicator, see
    docs/guides/recovery.md), and the job succeeds if any rank ran to a successful end.
    `healer`: starts processes in place of the lost ones (they join the job), supervised as the
    others, until a signal comes."""
    status = 0
    deadline = None  # when ranks still running are killed
    forwarded = 0
    seen: set = set()
    while True:
        running = [c for c in children if c.poll() is None]
        ended = [i for i, c in enumerate(children) if c.returncode is not None and i not in seen]
        seen.update(ended)
        lost = [i for i in ended if children[i].returncode != 0]
        if healer is not None and not signals.received:
            said = healer.after(children, ended)
        elif keep_survivors:
            said = [
                f"{healer.name(i) if healer else f'rank {i}'} exited with status "
                f"{children[i].returncode}; the other ranks go on (--keep-survivors)"
                for i in lost
            ]
        else:
            said = []
        for line in said:
            print(f"ringcomm-run: {line}", file=sys.stderr, flush=True)
        if lost and status == 0:
            code = children[lost[0]].returncode
            status = code if code > 0 else 128 - code
            if not keep_survivors:
                deadline = time.monotonic() + grace
        while forwarded < len(signals.received):
            number = signals.received[forwarded]
            forwarded += 1
            for child in running:
                child.send_signal(number)
            status = 128 + number
            if deadline is None:
                deadline = time.monotonic() + grace
        if not running:
            if keep_survivors and not forwarded and any(c.returncode == 0 for c in children):
                return 0
            return status
        if deadline is not None and time.monotonic() > deadline:
            for child in running:
                child.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            for child in running:
                if child.poll() is None:
                    child.kill()
            return status
        time.sleep(0.05)


def _command_of(program: Sequence[str]) -> list[str]:
    """What the ranks run: a Python script (``train.py``, or an executable file whose first line
    names python) under this launcher's Python, as ``ringcomm-run train.py`` always has; a
    command (``python train.py``, a shell script, a binary) as mpirun would run it."""
    first, rest = program[0], list(program[1:])
    if first.endswith(".py"):
        return [sys.executable, first, *rest]
    if os.path.isfile(first):
        if not os.access(first, os.X_OK) or _names_python(first):
            return [sys.executable, first, *rest]
        return [os.path.abspath(first), *rest]  # Popen looks only on PATH for a bare name
    if shutil.which(first) is not None:
        return [first, *rest]
    return [sys.executable, first, *rest]  # Python says the script is missing


def _names_python(path: str) -> bool:
    with open(path, "rb") as file:
        first_line = file.readline(256)
    return first_line.startswith(b"#!") and b"python" in first_line


def build_parser() -> argparse.ArgumentParser:
    """ringcomm-run's arguments (the documentation's reference is generated from them)."""
    parser = argparse.ArgumentParser(
        prog="ringcomm-run",
        description="Run N ranks of a Python program, on this machine or on hosts over ssh.",
    )
    parser.add_argument(
        "-np",
        "-n",
        dest="nranks",
        type=int,
        default=None,
        help="number of ranks (default: the slots of -H or --hostfile, else one per core); "
        "elastic: the number to start with",
    )
    hosts = parser.add_argument_group(
        "hosts (horovodrun's and mpirun's flags; ranks on other hosts start over ssh)"
    )
    where = hosts.add_mutually_exclusive_group()
    where.add_argument(
        "-H",
        "--hosts",
        metavar="HOST:SLOTS,...",
        help="hosts to run on and the ranks each takes, in order (default: this machine)",
    )
    where.add_argument(
        "--hostfile",
        "-hostfile",
        metavar="FILE",
        help="a file of hosts, one a line: 'host slots=N', 'host:N' or 'host'",
    )
    hosts.add_argument(
        "--ssh-command",
        default="ssh",
        metavar="COMMAND",
        help="the ssh client and its options, as one string ('ssh -F ./ssh_config'; default ssh)",
    )
    hosts.add_argument("--ssh-port", type=int, help="the port of the other hosts' ssh servers")
    hosts.add_argument("--ssh-identity-file", metavar="FILE", help="the key ssh logs in with")
    elastic = parser.add_argument_group(
        "elastic jobs (Horovod's flags; hosts other than this machine are reached over ssh)"
    )
    elastic.add_argument(
        "--host-discovery-script",
        metavar="SCRIPT",
        help="run elastic: SCRIPT prints the available hosts, one host:slots per line",
    )
    elastic.add_argument("--min-np", type=int, help="fewest ranks to run with (default: -np)")
    elastic.add_argument("--max-np", type=int, help="most ranks to run with (default: -np)")
    elastic.add_argument(
        "--slots-per-host",
        "--slots",
        dest="slots_per_host",
        type=int,
        help="slots of a host the script prints without :slots",
    )
    elastic.add_argument(
        "--elastic-timeout",
        type=float,
        help="seconds to wait for --min-np slots before the job fails "
        f"(default: HOROVOD_ELASTIC_TIMEOUT or {600})",
    )
    elastic.add_argument(
        "--reset-limit", type=int, help="most resets before the job fails (default: none)"
    )
    elastic.add_argument(
        "--blacklist-cooldown-range",
        type=float,
        nargs=2,
        metavar=("MIN", "MAX"),
        help="seconds a failed host stays blacklisted, doubling from MIN up to MAX "
        "(default: for ever)",
    )
    elastic.add_argument(
        "--verbose", "-v", action="store_true", help="say what the elastic driver does"
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=_GRACE_SECONDS,
        help="seconds ranks may go on after one failed or a signal came, before they are killed "
        f"({_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "--keep-survivors",
        action="store_true",
        help="when a rank fails, let the others go on (they may shrink their communicator: "
        "docs/guides/recovery.md); the job succeeds if any rank ends successfully",
    )
    parser.add_argument(
        "--replace",
        type=int,
        nargs="?",
        const=-1,
        default=0,
        metavar="N",
        help="when a rank fails, let the others go on and start its process again, with "
        "RINGCOMM_JOIN=1: it joins the running job in place when the ranks grow "
        "(docs/guides/recovery.md). On its host, or on a spare slot (the slots of -H or "
        "--hostfile beyond -np) where ssh could not reach its host, or that host lost all of "
        "its ranks. At most N replacements in all (default: as many as -np)",
    )
    parser.add_argument("-m", dest="module", help="run a module, as python -m does")
    parser.add_argument(
        "program",
        nargs=argparse.REMAINDER,
        help="a Python script and its arguments (run by this Python), or a command and its "
        "arguments, as mpirun takes them (python train.py)",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.module:
        command = [sys.executable, "-m", args.module, *args.program]
    elif args.program:
        program = args.program[1:] if args.program[0] == "--" else args.program
        if not program:
            parser.error("give a script or a command to run after --")
        command = _command_of(program)
    else:
        parser.error("give a script to run (or -m module)")
    ssh = Ssh(tuple(shlex.split(args.ssh_command)), args.ssh_port, args.ssh_identity_file)
    if args.host_discovery_script is None:
        for flag in ("min_np", "max_np", "slots_per_host", "elastic_timeout", "reset_limit"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag.replace('_', '-')} needs --host-discovery-script")
        try:
            hosts = (
                _hostlist.parse_hosts(args.hosts)
                if args.hosts
                else _hostlist.read_hostfile(args.hostfile)
                if args.hostfile
                else None
            )
            if args.nranks is not None:
                nranks = args.nranks
            else:
                nranks = sum(slots for _, slots in hosts) if hosts else _host.cores()
            if args.replace < -1:
                parser.error(f"--replace takes a count >= 0; got {args.replace}")
            return spawn(
                nranks,
                command,
                grace=args.grace,
                keep_survivors=args.keep_survivors,
                hosts=hosts,
                ssh=ssh,
                replacements=nranks if args.replace == -1 else args.replace,
            )
        except (ValueError, OSError) as error:
            parser.error(str(error))
    if args.hosts or args.hostfile:
        parser.error("an elastic job takes its hosts from --host-discovery-script, not -H")
    if args.replace:
        parser.error(
            "--replace is for a fixed set of hosts; an elastic job re-forms from the "
            "hosts the discovery script prints"
        )
    start = next((n for n in (args.nranks, args.min_np, args.max_np) if n is not None), None)
    if start is None:
        parser.error("an elastic job needs -np (or --min-np)")
    try:
        return spawn_elastic(
            command,
            args.host_discovery_script,
            start_np=start,
            min_np=start if args.min_np is None else args.min_np,
            max_np=start if args.max_np is None else args.max_np,
            slots_per_host=args.slots_per_host,
            elastic_timeout=args.elastic_timeout,
            reset_limit=args.reset_limit,
            cooldown_range=tuple(args.blacklist_cooldown_range)
            if args.blacklist_cooldown_range
            else None,
            grace=args.grace,
            verbose=args.verbose,
            ssh=ssh,
        )
    except ValueError as error:
        parser.error(str(error))


if __name__ == "__main__":
    sys.exit(main())
