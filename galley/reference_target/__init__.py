"""The bundled reference publishing target (PRODUCT.md §7.4): a standalone program, no Django.

Run it as ``python -m galley.reference_target --port 8001`` (``--help`` lists the fault
injection options), or in a test's thread: ``with ReferenceTarget(db_path=..., token=...) as target``.
The server itself is in ``server``; the command line in ``__main__``.
"""

from galley.reference_target.server import Faults, ReferenceTarget, serve

__all__ = ["Faults", "ReferenceTarget", "serve"]
