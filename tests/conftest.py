import os
import sys

# tests/ holds helper modules (the naive reference) imported by the tests.
sys.path.insert(0, os.path.dirname(__file__))
