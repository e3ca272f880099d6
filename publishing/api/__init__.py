"""The JSON API's routers for briefs, revisions, publication state and operators (docs/api.md).

Assembled with approvals' decisions router in galley/api.py and served under /api/v1/. Each view
is a thin adapter: parse, call one action (inside `transaction.atomic(durable=True)`, with the
Idempotency-Key held, for a POST) or selector, render.
"""
