"""Executable tool environments: Python classes, simulated worlds and built-in tools, bound in
an environments file; scenarios with executed ground truth; fresh episodes to act and replay in."""
