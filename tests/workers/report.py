"""What workers share: printing the one RESULT line the harness reads, and collecting failures."""

import json
import sys
import traceback


def report(result: dict) -> None:
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


class Failures(list):
    """The failures a worker reports (a list of strings): check() and case() add to it."""

    def check(self, name, condition, detail="") -> None:
        if not condition:
            self.append(f"{name}: {detail}")

    def case(self, name, body) -> None:
        """Runs body(); an exception becomes a failure with its traceback."""
        try:
            body()
        except Exception:
            self.append(f"{name}: raised\n{traceback.format_exc()}")
