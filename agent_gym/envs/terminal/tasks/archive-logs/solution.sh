#!/bin/bash
cd /app && tar -czf logs.tar.gz logs/*.log
