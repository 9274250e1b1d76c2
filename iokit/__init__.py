"""The input/output kit every layer of the suite shares (``accel_sim``, ``workloads``, ``bench``).

Torch-free, numpy-free and importing nothing else of the project, so that the accelerator model and
the pure federated-learning code can both use it without depending on each other
(docs/architecture.md):

* ``iokit.checks``: bounded numbers, typed config tables, duplicate-free lists: one-line errors
  that name the input and the fix;
* ``iokit.toml``: reading a TOML file with one error naming the file;
* ``iokit.files``: files and folders written atomically (a reader never sees half of one);
* ``iokit.outputs``: results folders the suite owns (a manifest), the ``--out`` rules, a lock;
* ``iokit.cli``: the one-line argument parser and the ``command`` decorator of every command;
* ``iokit.identity``: a run is the content of the files it reads; each value once by what it
  resolves to;
* ``iokit.consumed``: a folder one command reads from another, checked (finished, complete, finite);
* ``iokit.locks``: lock files (a results folder, a grid point), the one implementation;
* ``iokit.dotted``: importing what ``package.module:attribute`` names;
* ``iokit.provenance``: the git commit a result came from.
"""
