"""A FastAPI dependency that takes a permit per request, keyed by the caller's API key, and answers 429
with the permit server's own rate-limit headers (RateLimit, RateLimit-Policy, Retry-After) when refused.

Serve it with ``uvicorn examples.fastapi_dependency:app``; run as a script it calls itself through
FastAPI's TestClient until it is refused:

    EDGE_LIMITER_URL=http://127.0.0.1:8787 PERMIT_TOKEN=dev-permit-token python3 examples/fastapi_dependency.py
"""
from __future__ import annotations

import os
import uuid
from typing import Dict

from fastapi import Depends, FastAPI, Header, HTTPException

from edge_limiter import AsyncPermitClient, Decision

POLICY = os.environ.get("EDGE_LIMITER_POLICY", "default")
permits = AsyncPermitClient(os.environ.get("EDGE_LIMITER_URL", "http://127.0.0.1:8787"), os.environ.get("PERMIT_TOKEN", "dev-permit-token"))


async def permit(x_api_key: str = Header()) -> Decision:
    """One permit of POLICY for the caller's API key, or a 429 carrying the permit server's headers."""
    decision = await permits.take(POLICY, x_api_key)
    if not decision.allowed:
        raise HTTPException(status_code=429, detail=f"rate limited; retry in {decision.retry_after_ms} ms", headers=decision.rate_limit_headers)
    return decision


app = FastAPI()


@app.get("/reports")
async def reports(decision: Decision = Depends(permit)) -> Dict[str, object]:
    return {"reports": ["q1", "q2"], "permits_left": decision.remaining}


if __name__ == "__main__":
    from fastapi.testclient import TestClient

    api_key = f"key-{uuid.uuid4().hex[:8]}"
    with TestClient(app) as client:
        for n in range(1, 13):
            res = client.get("/reports", headers={"X-API-Key": api_key})
            print(f"request {n}: {res.status_code} {res.json()}")
            if res.status_code == 429:
                for name in ("RateLimit", "RateLimit-Policy", "Retry-After"):
                    print(f"  {name}: {res.headers[name]}")
                break
        else:
            raise SystemExit(f"the bucket of policy {POLICY} never refused: is it larger than 12?")
