"""``python -m bench.capture`` (``__main__``): one FL method's training step as a trace file."""
