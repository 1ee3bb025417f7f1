from callbacks.alpha_curriculum import AlphaCurriculumCallback
from callbacks.conditioning import SimulatorConditioningCallback
from callbacks.progress import RolloutProgress
from callbacks.samples import SampleTableCallback

__all__ = ["AlphaCurriculumCallback", "RolloutProgress", "SampleTableCallback", "SimulatorConditioningCallback"]
