"""Router-side count of tokens dispatched to each instance and not yet finished."""

from __future__ import annotations

import numpy as np

from llmsched_gym.gateway.view import RequestInfo


class TokenLedger:
    """Per-instance total context (input + expected output) of in-flight requests.

    The router only knows the expected output length, so that is what it counts.
    """

    def __init__(self, num_instances: int = 0):
        self.tokens = np.zeros(num_instances)
        self._sent: dict[int, float] = {}

    def add(self, request: RequestInfo, instance: int) -> None:
        """Count ``request`` as in flight on ``instance``."""
        n = request.input_tokens + request.expected_output_tokens
        self._sent[request.id] = n
        self.tokens[instance] += n

    def remove(self, request_id: int, instance: int) -> None:
        """Forget a request that left ``instance`` (unknown ids are ignored)."""
        n = self._sent.pop(request_id, None)
        if n is not None:
            self.tokens[instance] -= n
