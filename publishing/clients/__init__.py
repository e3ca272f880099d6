"""Clients of the services outside Galley, one module each: `target` (the publishing target
protocol, docs/target-protocol.md) and `ai` (the AI provider, docs/configuration.md#ai-provider),
plus `http`, what they share.
Only worker handlers call them, never inside a database transaction."""
