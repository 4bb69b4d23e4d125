"""One OS process of the contention test: threads sharing one bucket through PermitClient, round robin
over the servers. Prints a ready line, waits for "go" on stdin, runs for durationMs, prints one JSON line
of results (the shape of bench/accuracy-worker.ts: times in ms from "go", and "go" on the system's
monotonic clock so the parent can put every process on one time base)."""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Dict, List

from edge_limiter import PermitClient


def main() -> None:
    config: Dict[str, Any] = json.loads(sys.argv[1])
    clients = [PermitClient(url, config["token"]) for url in config["urls"]]
    # Open keep-alive connections now, so the first decisions after "go" do not wait for them.
    for c in clients:
        c.peek(config["policy"], config["key"])
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    go = time.monotonic()
    deadline = go + config["durationMs"] / 1000
    lock = threading.Lock()
    totals = {"admitted": 0, "decisions": 0, "errors": 0}
    starts: List[float] = []
    ends: List[float] = []
    admitted_at: List[float] = []
    admitted_from: List[float] = []
    latencies: List[float] = []

    def caller(index: int) -> None:
        n = index
        while time.monotonic() < deadline:
            client = clients[n % len(clients)]
            n += 1
            s = (time.monotonic() - go) * 1000
            try:
                d = client.take(config["policy"], config["key"])
                if d.reason is not None and d.reason != "lease":
                    raise RuntimeError(d.reason)
            except Exception:
                with lock:
                    totals["errors"] += 1
                continue
            e = (time.monotonic() - go) * 1000
            with lock:
                totals["decisions"] += 1
                starts.append(s)
                ends.append(e)
                latencies.append(e - s)
                if d.allowed:
                    totals["admitted"] += 1
                    admitted_at.append(e)
                    admitted_from.append(s)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(config["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    print(
        json.dumps(
            {
                **totals,
                "firstStart": min(starts),
                "firstEnd": min(ends),
                "lastStart": max(starts),
                "lastEnd": max(ends),
                "admittedAt": admitted_at,
                "admittedFrom": admitted_from,
                "maxLatencyMs": max(latencies),
                "goMonoMs": go * 1000,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
