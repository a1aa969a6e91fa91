"""What workers share: printing the one RESULT line the harness reads, and collecting failures."""

import json
import os
import sys
import traceback


def report(result: dict) -> None:
    line = "RESULT " + json.dumps(result) + "\n"
    if os.environ.get("RESULT_DIR"):  # a launcher that may drop the output of a failed job's ranks
        with open(os.path.join(os.environ["RESULT_DIR"], f"{os.getpid()}.result"), "w") as f:
            f.write(line)
    sys.stdout.write(line)
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
