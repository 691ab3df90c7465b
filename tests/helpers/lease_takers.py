"""A process that races other processes to take over expired writer leases
(``tests/core/test_lease.py``): for each tenant, wait at the barrier, try once, report
whether it won, hold until every taker has tried, then release."""

from __future__ import annotations

import os


def take_over(root: str, tenants: list[str], barrier, results) -> None:
    from quarry.core.index.lease import LeaseBusy, acquire

    for tenant in tenants:
        barrier.wait(timeout=120)
        try:
            held = acquire(root, tenant, "taker", wait_s=0, ttl_s=30)
        except LeaseBusy:
            held = None
        results.put((tenant, os.getpid(), held is not None))
        barrier.wait(timeout=120)  # every taker has tried while the winner still holds it
        if held is not None:
            held.ensure()
            held.release()
