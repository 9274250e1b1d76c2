"""Federated learning: data and partitions, methods, the federated loop, the communication
ledger and the CLI (``python -m workloads.fl.presets``). See docs/fl.md and docs/data.md."""
