import sys
from pathlib import Path

# The harness and workers import each other by plain name.
sys.path.insert(0, str(Path(__file__).parent))
