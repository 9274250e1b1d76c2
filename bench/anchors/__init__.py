"""``python -m bench.anchors`` (``__main__``): the cycle model held against measured FPGA
accelerators; the pricing is ``bench.lib.anchors``."""
