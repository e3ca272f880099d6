"""Clients of the services outside Galley, one module each: `target` (the publishing target
protocol, PRODUCT.md §7.4) and `ai` (the AI provider, §7.5), plus `http`, what they share.
Only worker handlers call them, never inside a database transaction."""
