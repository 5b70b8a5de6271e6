#!/bin/bash
cd /app && (python3 service.py >/dev/null 2>&1 &) ; for i in $(seq 50); do [ -s service.pid ] && break; sleep 0.1; done; cp service.pid pid.txt
