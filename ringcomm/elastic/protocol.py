"""What the elastic driver and its workers say to each other through the launcher's store (the
keys are listed in ringcomm/elastic/__init__.py), and what both sides need to read it."""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from typing import Optional

NOTICE_COUNT = "elastic/notices"


class HostUpdateResult(enum.IntFlag):
    """What a host-change notice says (Horovod's flags): hosts or slots were added, removed,
    or both."""

    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


@dataclass(frozen=True)
class SlotInfo:
    """Where one worker stands in a generation (Horovod's SlotInfo)."""

    hostname: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int

    @property
    def name(self) -> str:
        """The worker's identity across generations: its host and its slot there."""
        return worker_name(self.hostname, self.local_rank)


def worker_name(host: str, slot: int) -> str:
    return f"{host}:{slot}"


def slot_key(generation: int, name: str) -> str:
    return f"elastic/{generation}/slot/{name}"


def ready_key(generation: int, name: str) -> str:
    return f"elastic/{generation}/ready/{name}"


def job_prefix(generation: int) -> str:
    return f"elastic/{generation}/job/"


def notice_key(number: int) -> str:
    return f"elastic/notice/{number}"


def encode_assignment(slot: SlotInfo, notices: int) -> bytes:
    """A worker's place in a generation, and how many notices the driver had sent when it
    decided it (the worker's notices start after those)."""
    return json.dumps({**asdict(slot), "notices": notices}).encode()


def encode_removal(reason: str) -> bytes:
    return json.dumps({"removed": reason}).encode()


def decode_answer(value: bytes) -> tuple[Optional[SlotInfo], int, str]:
    """(slot, notices, "") for an assignment; (None, 0, reason) for a removal."""
    fields = json.loads(value)
    if "removed" in fields:
        return None, 0, fields["removed"]
    notices = fields.pop("notices")
    return SlotInfo(**fields), notices, ""


def generation_secret(secret: bytes, generation: int) -> bytes:
    """The secret a generation's data links prove: the job's, bound to the generation."""
    message = f"ringcomm elastic generation {generation}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest().encode()
