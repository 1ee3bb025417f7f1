"""genenv_pl: GenEnv (difficulty-aligned co-evolution of an LLM agent and an LLM environment
simulator) in PyTorch Lightning."""

__version__ = "0.1.0"
