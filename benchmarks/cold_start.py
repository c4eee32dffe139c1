"""Cold start of `--self-check` against a bare `python -c "import json"`, alternated.

    python benchmarks/cold_start.py [rounds]

Prints the median wall time of each and their ratio. Alternating the two in one loop keeps a
busy machine from favouring either. This is a measurement, not a test: it never fails.
"""

import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "lesson_03_tool_calling_loop.py"
COMMANDS = {
    "import json": [sys.executable, "-c", "import json"],
    "--self-check": [sys.executable, str(SCRIPT), "--self-check"],
}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    times: dict = {name: [] for name in COMMANDS}
    for _ in range(rounds):
        for name, command in COMMANDS.items():
            started = time.perf_counter()
            subprocess.run(command, stdout=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    for name, ms in medians.items():
        print(f"{name:>14}: {ms:6.1f} ms (median of {rounds})")
    print(f"{'ratio':>14}: {medians['--self-check'] / medians['import json']:.2f}x")


if __name__ == "__main__":
    main()
