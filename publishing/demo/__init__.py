"""Demo tools: the simulation behind `manage.py simulate` (editors and approvers racing each other)."""
