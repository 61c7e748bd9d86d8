"""Evolution strategies on paired seeds: CMA-ES (the ``cmaes`` library) over the small
parameter vector of a residual policy that is exactly a heuristic at ``theta = 0``.

* :mod:`agents.es.residual`: the residual policies (Routing, FlowControl, Gateway);
* :mod:`agents.es.paired`: candidates x seeds clusters in one native vector env;
* :mod:`agents.es.search`: the CMA-ES loop, the final selection, ``agent.json``;
* :mod:`agents.es.agent`: a saved run as ``agent:PATH``.

``llmsched-gym train --algo cmaes`` runs it (docs/agents.md, "Evolution strategies on
paired seeds").
"""
