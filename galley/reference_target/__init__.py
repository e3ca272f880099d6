"""The bundled reference publishing target (docs/target-protocol.md): a standalone program, no Django.

Run it as ``python -m galley.reference_target --port 8001`` (``--help`` lists the fault
injection options), or in a test's thread: ``with ReferenceTarget(db_path=..., token=...) as target``.
It stands in for a real publishing service (WordPress and the like) in development and in tests, so
it deliberately shares nothing with Galley: no Django, no ORM, no Galley database, only the standard
library. It is not part of the product's wheel: it runs from the checkout.

Its rooms, from the bottom up:
    protocol   a publication request's rules, the receipt, the published page
    store      its own SQLite file: publications (immutable) and the ledger (append-only)
    faults     what goes wrong and how often, drawn once per POST from a seeded generator
    http       the HTTP server: routing, authentication, a POST's steps in order
    harness    ``ReferenceTarget``, what tests start, stop and steer; ``serve``, which runs it until a signal
    __main__   the command line
"""

from galley.reference_target.faults import Faults
from galley.reference_target.harness import ReferenceTarget, serve

__all__ = ["Faults", "ReferenceTarget", "serve"]
