"""Workloads: request tables, the synthetic generator, trace loaders and the registry of
public traces."""

from .workload import Workload

__all__ = ["Workload"]
