#!/bin/bash
# Run the task's tests (TEST_DIR is where the tests were copied).
cd "${TEST_DIR:-/tests}" || exit 1
python3 -m pytest test_outputs.py -rA -p no:cacheprovider
