#!/bin/bash
echo 'Hello, sandbox!' > /app/greeting.txt
