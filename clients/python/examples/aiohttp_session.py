"""An aiohttp ClientSession whose every request first waits for a permit from the shared bucket.

A ``TraceConfig`` hook acquires the permit before each request is sent: one reservation on the permit
endpoint, then ``asyncio.sleep`` until it is due (no polling, the event loop never blocked), so many
processes sharing one upstream API stay under its limit together. A request that cannot get a permit
within its wait raises AcquireTimeoutError and is not sent. The demo serves its own upstream:

    EDGE_LIMITER_URL=http://127.0.0.1:8787 PERMIT_TOKEN=dev-permit-token python3 examples/aiohttp_session.py
"""
from __future__ import annotations

import asyncio
import os
import time
import uuid
from types import SimpleNamespace
from typing import Callable

import aiohttp
from aiohttp import web

from edge_limiter import AcquireTimeoutError, AsyncPermitClient

POLICY = os.environ.get("EDGE_LIMITER_POLICY", "default")


def permit_per_request(permits: AsyncPermitClient, policy: str, key: Callable[[str], str], timeout_ms: int = 30_000) -> aiohttp.TraceConfig:
    """A TraceConfig that acquires a permit of ``policy`` for the bucket ``key(url)`` before each request.

    A request may set its own longest wait: ``session.get(url, trace_request_ctx={"permit_timeout_ms": 0})``.
    """

    async def on_request_start(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestStartParams) -> None:
        wait = (ctx.trace_request_ctx or {}).get("permit_timeout_ms", timeout_ms)
        await permits.acquire(policy, key(str(params.url)), timeout_ms=wait)

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_request_start)
    return trace


async def main() -> None:
    # The upstream API this demo calls (in production: someone else's, with a limit).
    async def item(request: web.Request) -> web.Response:
        return web.json_response({"item": request.match_info["n"]})

    upstream = web.Application()
    upstream.router.add_get("/items/{n}", item)
    runner = web.AppRunner(upstream)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"

    account = f"upstream-{uuid.uuid4().hex[:8]}"  # one bucket for the upstream account
    async with AsyncPermitClient(os.environ.get("EDGE_LIMITER_URL", "http://127.0.0.1:8787"), os.environ.get("PERMIT_TOKEN", "dev-permit-token")) as permits:
        trace = permit_per_request(permits, POLICY, key=lambda url: account, timeout_ms=10_000)
        async with aiohttp.ClientSession(trace_configs=[trace]) as session:
            started = time.monotonic()

            async def fetch(n: int) -> None:
                async with session.get(f"{base}/items/{n}") as res:
                    body = await res.json()
                    print(f"GET /items/{n} -> {res.status} {body} at {time.monotonic() - started:.2f} s")

            # Five at once: the bucket's burst goes now, the rest as its tokens refill, each at its turn.
            await asyncio.gather(*(fetch(n) for n in range(1, 6)))
            # One that may not wait: refused at once, and never sent.
            try:
                await session.get(f"{base}/items/6", trace_request_ctx={"permit_timeout_ms": 0})
            except AcquireTimeoutError as refused:
                print(f"GET /items/6 refused: {refused}")
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
