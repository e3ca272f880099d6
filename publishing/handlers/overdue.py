"""The `schedule_overdue` handler: a worker tells operators of a schedule the sweep found overdue
(publishing.actions.overdue wrote the alert). Thin, like a view; registered in publishing.apps.

It reads the schedule again: one published and verified (or ended on purpose) since the sweep is no
longer anyone's problem, and the alert ends without telling. The telling is the finalize, so a retry
after a crash tells once: the hooks' rows commit with the alert's success.
"""

from __future__ import annotations

from publishing.actions.overdue import do_tell_overdue_schedule
from publishing.selectors.overdue import get_overdue_by_key
from workers.models import Operation
from workers.registry import ClaimedOperation, Success


def handle_schedule_overdue(claimed: ClaimedOperation) -> Success:
    publish_key = Operation.objects.values_list("key", flat=True).get(id=claimed.arguments["publish_operation_id"])
    schedule = get_overdue_by_key([publish_key]).get(publish_key)
    if schedule is None:
        return Success(result={"told": False, "reason": "published, verified or ended before the alert went out"})
    return Success(
        result={"told": True, "overdue_by_seconds": round(schedule.overdue_by.total_seconds(), 3)},
        finalize=lambda: do_tell_overdue_schedule(schedule),
    )
