"""Wall and CPU time of README's test command (`python -m pytest`), run a few times.

    python benchmarks/suite_time.py [rounds]        (Linux or macOS)

Run it from the activated .venv of README's step 2, on a machine doing nothing else. Prints
each round's wall and CPU seconds (pytest, its xdist workers and the processes they start),
the median wall time against the 30 s goal on 2 cores, and the slowest tests of the last
round: where to look when the figure grows. In a fresh clone round 1 is the cold one (pytest
rewrites and caches the test modules), a few seconds slower. A measurement, not a test.
"""

import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_SECONDS = 30


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every finished descendant
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=8"]
    walls, output = [], ""
    for round_number in range(1, rounds + 1):
        cpu_before, started = cpu_seconds(), time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        walls.append(time.perf_counter() - started)
        output = done.stdout
        summary = (output.strip().splitlines() or ["(no output)"])[-1].strip("= ")
        print(
            f"round {round_number}: {walls[-1]:5.1f} s wall, "
            f"{cpu_seconds() - cpu_before:5.1f} s CPU  ({summary})"
        )
    median = statistics.median(walls)
    verdict = "within" if median <= GOAL_SECONDS else "OVER"
    print(f"median {median:.1f} s on {os.cpu_count()} cores: {verdict} the {GOAL_SECONDS} s goal")
    print("slowest tests of the last round:")
    for line in re.findall(r"(?m)^\d+\.\d+s (?:call|setup|teardown) .*$", output):
        print("  " + line)


if __name__ == "__main__":
    main()
