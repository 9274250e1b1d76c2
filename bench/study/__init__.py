"""``python -m bench.study`` (``__main__``): an accuracy study run in phases (``phases``), its report
(``report``) and a reproduction check (``reproduce``); the protocol it shares with ``bench.run``
is ``bench.lib.study``."""
