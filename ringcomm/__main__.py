"""python -m ringcomm info: what this ringcomm is and sees (see ringcomm/_info.py)."""

import sys

_COMMANDS = ("info",)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in _COMMANDS:
        print("usage: python -m ringcomm info [--plain | --json]", file=sys.stderr)
        return 2
    from ringcomm._info import main as info

    return info(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
