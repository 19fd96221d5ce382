"""A checker for the Chrome trace-event JSON format (the subset ember writes), as Perfetto and
chrome://tracing read it: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
("Trace Event Format"): a JSON object with a ``traceEvents`` array; every event has ``name``
(string), ``ph`` (phase, one character), ``pid`` and ``tid`` (integers), ``ts`` (microseconds,
a number); complete events (``ph: "X"``) have ``dur`` >= 0; metadata events (``ph: "M"``) name a
process or thread in ``args.name``; ``args`` is an object."""

from __future__ import annotations

from typing import Any

PHASES = set("BEXiIbneSTpFsftPOCMNDRc(),")
METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index", "process_labels"}


def check_trace(doc: Any) -> list[dict[str, Any]]:
    """Raise AssertionError naming the first event that breaks the format; returns the events."""
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), "no traceEvents array"
    if "displayTimeUnit" in doc:
        assert doc["displayTimeUnit"] in ("ms", "ns")
    for k, ev in enumerate(doc["traceEvents"]):
        where = f"event {k} ({ev!r:.120})"
        assert isinstance(ev, dict), where
        assert isinstance(ev.get("name"), str) and ev["name"], where
        assert isinstance(ev.get("ph"), str) and len(ev["ph"]) == 1 and ev["ph"] in PHASES, where
        for key in ("pid", "tid"):
            assert type(ev.get(key)) is int, f"{where}: {key}"
        assert isinstance(ev.get("ts"), (int, float)) and ev["ts"] >= 0, f"{where}: ts"
        assert isinstance(ev.get("args", {}), dict), f"{where}: args"
        if ev["ph"] == "X":
            assert isinstance(ev.get("dur"), (int, float)) and ev["dur"] >= 0, f"{where}: dur"
        if ev["ph"] == "M":
            assert ev["name"] in METADATA and isinstance(ev["args"].get("name", ""), (str, int)), where
    return doc["traceEvents"]
