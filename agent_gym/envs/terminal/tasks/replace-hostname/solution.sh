#!/bin/bash
find /app/config -name '*.conf' -exec sed -i 's/old\.example\.com/new.example.com/g' {} +
