"""The durable machinery's writes, by family:

- `enqueue`: record an intent (operation row) and its durable prerequisites, in the caller's transaction;
- `claims`: the one-statement claim and every fenced transition a worker makes afterwards;
- `housekeeping`: the reconciler of expired leases and the retention purge;
- `operator`: audited, idempotent operator actions (Django admin).

No function here makes a network call.
"""
