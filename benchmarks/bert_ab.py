"""The earlier name of ``benchmarks/model_ab.py`` (same arguments; the commands recorded in
``benchmarks/results/*_ab_*.json`` use it)."""

import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_ab.py"), run_name="__main__")
