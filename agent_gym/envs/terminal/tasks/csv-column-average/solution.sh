#!/bin/bash
awk -F, 'NR>1 && $2=="blue" {s+=$3; n++} END {printf "%.1f\n", s/n}' /app/scores.csv > /app/blue_avg.txt
