"""4 Python processes x 16 threads share one bucket through the two servers (both on one Redis) for 3 s:
0 over and 0 under against the ideal, in total and in every window (the judgement of
test/load/contention.test.ts, bench/accuracy.ts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import unittest
from pathlib import Path
from typing import Any, Dict, List

from accuracy import score
from support import POLICIES, TOKEN, URLS, unique

PROCESSES = 4
THREADS = 16
DURATION_MS = 3000
WORKER = Path(__file__).with_name("contention_worker.py")


def run_workers(config: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Starts the workers, waits until all are ready, says "go" to all at once, collects their results,
    shifted onto the earliest worker's "go"."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    workers = [
        subprocess.Popen([sys.executable, str(WORKER), json.dumps(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(PROCESSES)
    ]
    try:
        for w in workers:
            assert w.stdout is not None
            ready = w.stdout.readline()
            if not ready:
                raise RuntimeError(f"a worker exited before it was ready ({w.wait()})")
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        results = []
        for w in workers:
            out, _ = w.communicate(timeout=60)
            if w.returncode != 0:
                raise RuntimeError(f"a worker exited {w.returncode}")
            results.append(json.loads(out))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    base = min(r["goMonoMs"] for r in results)
    shifted = []
    for r in results:
        d = r["goMonoMs"] - base
        shifted.append(
            {
                **r,
                **{k: r[k] + d for k in ("firstStart", "firstEnd", "lastStart", "lastEnd")},
                "admittedAt": [t + d for t in r["admittedAt"]],
                "admittedFrom": [t + d for t in r["admittedFrom"]],
            }
        )
    return shifted


class Contention(unittest.TestCase):
    def test_four_processes_of_sixteen_threads_through_two_servers_are_exact(self) -> None:
        policy = POLICIES["contention"]
        capacity, rate = policy["capacity"], policy["refillPerSecond"]
        started = time.monotonic()
        results = run_workers({"urls": URLS, "token": TOKEN, "policy": "contention", "key": unique("contention"), "threads": THREADS, "durationMs": DURATION_MS})
        a = score(results, capacity, rate)
        print(
            f"[python contention] {PROCESSES} processes x {THREADS} threads, {time.monotonic() - started:.1f} s: decisions={a['decisions']} "
            f"admitted={a['admitted']} ideal in [{a['idealMin']:.2f}, {a['idealMax']:.2f}] window over={a['windowOver']} under={a['windowUnder']}",
            file=sys.stderr,
        )
        out = os.environ.get("EDGE_LIMITER_CONTENTION_OUT")
        if out:
            Path(out).write_text(json.dumps({"results": results, "score": a}))
        self.assertEqual(a["errors"], 0)
        self.assertEqual(a["windowOver"], 0)
        self.assertEqual(a["windowUnder"], 0)
        # The bucket was contended: most decisions were refusals.
        self.assertGreater(a["decisions"], a["admitted"] * 2)
        self.assertLessEqual(a["admitted"], int(a["idealMax"]))
        self.assertGreaterEqual(a["admitted"], int(a["idealMin"] - 1))


if __name__ == "__main__":
    unittest.main()
