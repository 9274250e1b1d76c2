"""``python -m bench.dse SPACE.toml``: a hardware design-space exploration for federated training
(issue 24; docs/dse.md). The torch-free core is ``accel_sim`` (``space``, ``batch``, ``resources``,
``pareto``); this package reads the space file (``spec``), captures each model's and method's
trace once (``traces``), prices every point chunk by chunk and keeps the Pareto fronts
(``explore``)."""
