#!/bin/bash
cd /app/jobs
bash a.sh & pa=$!
bash b.sh & pb=$!
wait $pa; ca=$?
wait $pb; cb=$?
echo "a=$ca b=$cb" > /app/codes.txt
