import sys

from ringcomm.bench.cli import main

# Guarded: multiprocessing's "spawn" start method imports the main module in its children.
if __name__ == "__main__":
    sys.exit(main())
