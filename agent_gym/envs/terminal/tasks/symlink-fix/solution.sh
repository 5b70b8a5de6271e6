#!/bin/bash
cd /app && ln -sfn releases/$(ls releases | sort | tail -1) current
