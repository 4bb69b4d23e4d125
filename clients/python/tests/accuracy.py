"""The contention judgement of bench/accuracy.ts (windowOver, windowUnder, score), in Python, for the
results of contention_worker.py. test/load/python-client.test.ts scores the same results with the
TypeScript original and checks that both agree."""
from __future__ import annotations

import bisect
import math
from typing import Any, Dict, List, Sequence


def window_over(started: Sequence[float], answered: Sequence[float], capacity: float, rate: float) -> int:
    """The most any window admitted beyond capacity + rate x its length: admissions i..j (by answer) were
    decided within [the earliest start among them, answer j] (0 when exact)."""
    order = sorted(range(len(answered)), key=lambda i: answered[i])
    worst = 0
    for j in range(len(order)):
        earliest = math.inf
        for i in range(j, -1, -1):
            earliest = min(earliest, started[order[i]])
            span_ms = answered[order[j]] - earliest
            bound = math.floor(capacity + rate * span_ms / 1000 + 1e-9)
            worst = max(worst, j - i + 1 - bound)
    return worst


def window_under(answered: Sequence[float], from_ms: float, to_ms: float, max_latency_ms: float, rate: float) -> int:
    """The worst shortfall, over windows [a, b] on a 10 ms grid, of admissions answered in the window
    below floor(rate x (b - a - max latency)) - 1 (0 when no window starves)."""
    at = sorted(answered)
    grid: List[float] = []
    t = from_ms
    while t <= to_ms:
        grid.append(t)
        t += 10
    worst = 0
    for x, a in enumerate(grid):
        before = bisect.bisect_right(at, a - 1e-9)
        for b in grid[x + 1:]:
            need = math.floor(rate * (b - a - max_latency_ms) / 1000) - 1
            if need > 0:
                worst = max(worst, need - (bisect.bisect_right(at, b) - before))
    return worst


def score(results: Sequence[Dict[str, Any]], capacity: float, rate: float) -> Dict[str, float]:
    admitted = sum(r["admitted"] for r in results)
    min_span = max(r["lastStart"] for r in results) - min(r["firstEnd"] for r in results)
    max_span = max(r["lastEnd"] for r in results) - min(r["firstStart"] for r in results)
    started = [t for r in results for t in r["admittedFrom"]]
    answered = [t for r in results for t in r["admittedAt"]]
    return {
        "admitted": admitted,
        "decisions": sum(r["decisions"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "idealMin": capacity + rate * min_span / 1000,
        "idealMax": capacity + rate * max_span / 1000,
        "windowOver": window_over(started, answered, capacity, rate),
        "windowUnder": window_under(
            answered,
            min(r["firstEnd"] for r in results),
            max(r["lastStart"] for r in results),
            max(r["maxLatencyMs"] for r in results),
            rate,
        ),
    }
