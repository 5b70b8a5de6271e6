#!/bin/bash
tr -cs 'A-Za-z' '\n' < /app/text.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2 | head -3 | awk '{print $2}' > /app/top.txt
