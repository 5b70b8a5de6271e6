#!/bin/bash
cd /app/tree && find . -type f -perm -o+w -printf '%P\n' | sort > /app/world_writable.txt && find . -type f -perm -o+w -exec chmod o-w {} +
