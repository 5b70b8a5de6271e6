#!/bin/bash
cd /app/data && find . -type f -printf '%s %P\n' | sort -n | tail -1 | cut -d' ' -f2- > /app/largest.txt
