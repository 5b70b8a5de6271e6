#!/bin/bash
mkdir -p /app/work/stage
cd /app/work/stage
RUN_ID=42
stamp() { echo "run $RUN_ID" > "$1"; }
stamp marker.txt
pwd > /app/work/where.txt
