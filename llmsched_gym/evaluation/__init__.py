"""The evaluation harness: per-request metrics, the baseline comparison, paired-seed
statistics and figures."""

from .harness import ResultTable, evaluate, parse_policy, run_studies
from .metrics import request_records, summarize

__all__ = ["ResultTable", "evaluate", "parse_policy", "request_records", "run_studies", "summarize"]
