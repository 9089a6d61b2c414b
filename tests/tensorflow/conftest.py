"""The TensorFlow suites start their workers with tests/python/launch.py
(kolorun, deadlines, the OK-line check): one launcher for every Python suite."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
