"""The library floor of the commands: the machinery several ``bench/<command>/`` packages share.

A command (``bench/<name>/__main__.py``) parses its flags, calls functions of this package and
writes; a command's own modules stay in its package. This package imports no command package, and
no command package imports another (``tests/test_architecture.py``), so what two commands share is
here (with some modules only one command uses: figures, parts of the study protocol, ``anchors``,
``findings``):

* ``spec``: the run a command trains (``RunSpec``, its flags); ``resolve``: its one resolution;
* ``fl``: federated runs as jobs (``jobs``) and ``bench.fl``'s load, train, write (``pipeline``);
* ``run``: ``bench.run``'s pricing of every figure for every model, and its grid runner;
* ``grid``: the grid engine (``engine``) and the registered runners a grid may name (``runners``);
* ``study``: an accuracy study's specification, tuning rule, statistics, convergence rule,
  verdict wording, and its grid runner (``runner``);
* ``plots``: every figure, with one matplotlib backend;
* ``formulas``: SphereFed Table 1's closed forms; ``paper``: the paper's setting and claims;
  ``results``: the results format (files, columns, version);
* ``anchors``: the cycle model held against measured FPGAs (``bench.anchors``); ``findings``
  (``findings_study``, ``findings_costs``): docs/findings.md and the README headline (``bench.findings``).
"""
