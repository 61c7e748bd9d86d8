"""The gateway: the policy interface, what policies see, the saturation detector and llm-d's
EndpointPickerConfig format.

Policies (routers, usage limits, admission) implement :mod:`~llmsched_gym.gateway.policy`'s
protocols over the :class:`~llmsched_gym.gateway.view.RouterView`; the simulator runs the
gateway's queues and dispatch cycles in the compiled engine.
"""
