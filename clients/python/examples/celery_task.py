"""A Celery task that takes a permit from the shared bucket before calling a rate-limited partner API.

Every worker of every host asks the same permit endpoint, so together they stay under the partner's
limit. A refused task is not failed: it is retried when the server says tokens exist again. The demo
runs eagerly (``task_always_eager``, an in-memory broker), so it needs no broker:

    EDGE_LIMITER_URL=http://127.0.0.1:8787 PERMIT_TOKEN=dev-permit-token python3 examples/celery_task.py
"""
from __future__ import annotations

import os
import uuid

from celery import Celery, Task
from celery.exceptions import Retry

from edge_limiter import PermitClient

app = Celery("partner", broker="memory://", backend="cache+memory://")
app.conf.update(task_always_eager=True, task_eager_propagates=True)

permits = PermitClient(os.environ.get("EDGE_LIMITER_URL", "http://127.0.0.1:8787"), os.environ.get("PERMIT_TOKEN", "dev-permit-token"))
POLICY = os.environ.get("EDGE_LIMITER_POLICY", "default")


class RateLimited(Exception):
    """The partner's limit is reached for this account; retry in ``retry_after`` seconds."""

    def __init__(self, account: str, retry_after: float) -> None:
        super().__init__(f"no permit for {account}; tokens exist in {retry_after:.1f} s")
        self.retry_after = retry_after


@app.task(bind=True, max_retries=5)  # type: ignore[misc]  # Celery has no type hints
def sync_account(self: Task, account: str) -> str:
    # The permit first, in one request. Its Idempotency-Key is this delivery's: a message delivered again
    # (a worker died after the take, with acks_late) is answered again, not charged again.
    decision = permits.take(POLICY, account, idempotency_key=f"{self.request.id}-{self.request.retries}")
    if not decision.allowed:
        # Back on the queue, due when the bucket has the token again.
        wait = decision.retry_after_ms / 1000
        raise self.retry(countdown=wait, exc=RateLimited(account, wait))
    # ...the partner API call goes here...
    return f"synced {account} (permits left: {decision.remaining})"


if __name__ == "__main__":
    account = f"account-{uuid.uuid4().hex[:8]}"
    # Eager mode runs each task at once in this process; a refused one raises the Retry that a worker
    # would turn into a delivery `countdown` seconds later.
    for n in range(1, 13):
        try:
            print(f"task {n}: {sync_account.delay(account).get()}")
        except Retry as retry:
            print(f"task {n}: refused ({retry.exc}), retried in {retry.when:.1f} s")
            break
    else:
        raise SystemExit(f"the bucket of policy {POLICY} never refused: is it larger than 12?")
