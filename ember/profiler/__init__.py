"""ember's profiler: per-kernel and per-node times, FLOPs and bytes counted from the loop IR,
rates against the device's measured roofline, and exports (rocprof-style CSV, Chrome trace,
roofline plot). ``Model.profile`` is the entry point; ``docs/profiling.md`` describes it."""

from .cost import Cost, CostUnknown, count_cost
from .peaks import Peaks, device_peaks
from .recorder import StepRecorder, StepTime
from .result import EXTRA_COLUMNS, ROCPROF_COLUMNS, NodeStats, ProfileResult, Stats

__all__ = ["EXTRA_COLUMNS", "ROCPROF_COLUMNS", "Cost", "CostUnknown", "NodeStats", "Peaks", "ProfileResult",
           "Stats", "StepRecorder", "StepTime", "count_cost", "device_peaks"]
