from callbacks.alpha_curriculum import AlphaCurriculumCallback
from callbacks.conditioning import SimulatorConditioningCallback
from callbacks.heap_trim import HeapTrim
from callbacks.progress import RolloutProgress
from callbacks.run_summary import RunSummary
from callbacks.samples import SampleTableCallback

__all__ = ["AlphaCurriculumCallback", "HeapTrim", "RolloutProgress", "RunSummary", "SampleTableCallback",
           "SimulatorConditioningCallback"]
