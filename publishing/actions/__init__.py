"""Publishing's writes, by subject:

- `briefs`: create a brief, replace its source material (each starts a summary run);
- `revisions`: the brief's status moves, immutable revisions, a suggestion taken as a revision;
- `summaries`: summary runs and their steps' canonical artifacts and continuations;
- `publications`: the intent to publish, the publication, its verification.

check_* validates input and authorises the acting user, then calls do_*; do_* assumes valid
input, writes, and records the audit event in the same transaction. Every action joins the
caller's transaction (entry points, views and worker finalizes, open it). No action makes a
network call.
"""
