#!/bin/bash
cd /app/repo && git log --format=%H -S 'DEBUG = True' -- settings.py | tail -1 > /app/bad_commit.txt
