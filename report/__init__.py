"""The incident report: one self-contained HTML page (inline CSS, JS and SVG, no external reference)
built from the pipeline's output records — a fleet overview (final statuses, drop reasons, dead
letters, decisions by kind and backend, dispatches), a banner with replay's decisions mode and
divergences, and one Goal → Observe → Decide → Act → Evidence → End swimlane per experience with
its decisions (divergences marked), dispatches (each linked to its trigger), dead letters (never a
payload), closing evidence, and the device's network outages and voice sessions as bands. Lanes
can be filtered by device, experience, status, decision, backend, drop reason or dead-letter
reason, sorted by severity, and laid on one shared time axis; the page works from 400 px wide.
Past 40 lanes they start collapsed and each is drawn from compressed data when opened, so a large
replay's page stays small; the writer streams the output files instead of holding them.
It needs only the standard library and the contract enums of ``topics.records``.
`render_report` renders records, `render_report_from_dir` renders a replay or demo output
directory into its `report.html`, and `python -m report DIR` does the same from the shell.
"""

from report.html import render_report, render_report_from_dir

__all__ = ["render_report", "render_report_from_dir"]
