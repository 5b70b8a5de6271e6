#!/bin/bash
set -a; . /app/settings.env; set +a; bash /app/render.sh > /app/rendered.txt
