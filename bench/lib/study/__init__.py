"""An accuracy study's protocol (docs/study.md): ``spec`` (the study file), ``tuning`` (the tuning
rule and edge extension), ``stats`` (estimates, intervals, equivalence), ``curves`` (the
convergence rule), ``verdicts`` (their wording), ``runner`` (one training run, the grid runner
``bench.study``). ``bench.study`` runs the phases and writes the report; ``bench.run`` compares
a run to the shipped reference studies with the same statistics."""
