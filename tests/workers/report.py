"""What workers share: printing the one RESULT line the harness reads."""

import json
import sys


def report(result: dict) -> None:
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
