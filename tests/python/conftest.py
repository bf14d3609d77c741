import os
import sys

# The tests' helper modules (models, export_util) sit beside them.
sys.path.insert(0, os.path.dirname(__file__))
