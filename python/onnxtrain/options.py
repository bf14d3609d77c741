"""Options of onnxtrain.Module, each overridable by an environment variable (the environment wins)."""

import dataclasses
import logging
import os


@dataclasses.dataclass
class Options:
    log_level: str = "WARNING"   # ONNXTRAIN_LOG_LEVEL: INFO logs each first-step phase and its time
    save_onnx: str = ""          # ONNXTRAIN_SAVE_ONNX: a folder to save the exported graphs in
    fallback: str = "raise"      # ONNXTRAIN_FALLBACK: "raise", or "torch" to run the module itself, warning once
    # ONNXTRAIN_MEMORY_OPT_CONFIG (alias ORTMODULE_MEMORY_OPT_CONFIG): recompute plans, "ClusterId:Strategy:Count,..."
    # inline or a path to a JSON array of such strings
    memory_opt_config: str = ""
    # ONNXTRAIN_MEMORY_OPT_LEVEL (alias ORTMODULE_MEMORY_OPT_LEVEL): 0 the config only, 1 transformer layer-wise
    memory_opt_level: int = 0
    # ONNXTRAIN_MEMORY_BUDGET: keep at most this fraction of the stash (e.g. 0.3), for the first batch's sizes;
    # the memory optimizer recomputes the cheapest set of activations that meets it
    memory_budget: float = 0.0
    print_memory_stats: bool = False  # ONNXTRAIN_PRINT_MEMORY_STATS=1: log the memory of each training step's phases

    def resolved(self):
        """These options with the environment's overrides applied and checked."""
        o = dataclasses.replace(self)
        o.log_level = os.environ.get("ONNXTRAIN_LOG_LEVEL", o.log_level).upper()
        o.save_onnx = os.environ.get("ONNXTRAIN_SAVE_ONNX", o.save_onnx)
        o.fallback = os.environ.get("ONNXTRAIN_FALLBACK", o.fallback).lower()
        o.memory_opt_config = os.environ.get("ONNXTRAIN_MEMORY_OPT_CONFIG",
                                             os.environ.get("ORTMODULE_MEMORY_OPT_CONFIG", o.memory_opt_config))
        level = os.environ.get("ONNXTRAIN_MEMORY_OPT_LEVEL", os.environ.get("ORTMODULE_MEMORY_OPT_LEVEL", o.memory_opt_level))
        if str(level) not in ("0", "1"):
            raise ValueError(f"onnxtrain: memory optimizer level '{level}' is not 0 or 1 (level 2 is not supported yet)")
        o.memory_opt_level = int(level)
        o.print_memory_stats = os.environ.get("ONNXTRAIN_PRINT_MEMORY_STATS", "1" if o.print_memory_stats else "0") == "1"
        budget = os.environ.get("ONNXTRAIN_MEMORY_BUDGET", o.memory_budget)
        try:
            o.memory_budget = float(budget)
        except ValueError:
            raise ValueError(f"onnxtrain: ONNXTRAIN_MEMORY_BUDGET / Options.memory_budget is '{budget}'; "
                             "give a fraction of the stash such as 0.3") from None
        if o.fallback not in ("raise", "torch"):
            raise ValueError(f"onnxtrain: ONNXTRAIN_FALLBACK / Options.fallback is '{o.fallback}'; use 'raise' or 'torch'")
        if o.log_level not in logging.getLevelNamesMapping():
            raise ValueError(f"onnxtrain: log level '{o.log_level}' is not one of DEBUG, INFO, WARNING, ERROR")
        return o
