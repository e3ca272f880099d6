"""Worker entry points, one per operation kind, thin like views: load, call an outside service
with no transaction open, classify its answer, and hand the writes to one action, which runs in
the fenced finalize transaction (workers.registry.Success.finalize). Registered in publishing.apps."""
