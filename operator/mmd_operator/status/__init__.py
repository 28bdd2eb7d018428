"""The status a resource shows, and what one reconcile found that it shows.

- `report`: the phase, the conditions with classified reasons and the events of `Findings` (`report`),
  the runtime's words (`RUNTIME_WORDS`), the transition an admin's log shows (`transition`);
- `assessment`: the findings of one reconcile after its writes (`assess`), each runtime's part of them
  from one table.

Decides no write. Pure: imports the api models and the judgement.
"""

from mmd_operator.status.report import (
    ConfigMapState,
    Findings,
    Report,
    previous_status,
    recorded_kind,
    report,
    transition,
)

__all__ = ["ConfigMapState", "Findings", "Report", "previous_status", "recorded_kind", "report", "transition"]
